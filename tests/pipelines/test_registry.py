"""The registry: every pipeline generates, builds, runs, and plants findable hot keys."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from explorer.pipelines import PIPELINES, Pipeline, ReplayClock, get
from explorer.pipelines._common import arrival_order, planted_keys_dominate, sample_keys

NAMES = ["consumer_lag", "dedup", "fraud", "orders", "sessions", "url_counts"]


def test_registry_lists_the_pipelines():
    assert sorted(PIPELINES) == NAMES
    assert all(isinstance(p, Pipeline) and p.name == n for n, p in PIPELINES.items())
    with pytest.raises(KeyError, match="url_counts"):
        get("nope")
    with pytest.raises(AttributeError):
        PIPELINES["dedup"].name = "x"  # frozen


@pytest.mark.parametrize("name", NAMES)
def test_generate_is_deterministic_and_sized(name):
    p = PIPELINES[name]
    a = p.generate(1500, seed=1)
    assert a == p.generate(1500, seed=1)
    assert a != p.generate(1500, seed=2)
    assert 0.9 * 1500 <= len(a) <= 1.1 * 1500


@pytest.mark.parametrize("name", NAMES)
def test_planted_hot_keys_are_the_top_keys(name):
    p = PIPELINES[name]
    records = p.generate(20_000, seed=0)
    counts = Counter(p.key_of(r) for r in records)
    top = [k for k, _ in counts.most_common(len(p.hot_keys))]
    assert set(top) == set(p.hot_keys)


@pytest.mark.parametrize("name", NAMES)
def test_operators_and_state_match_the_registry(name):
    p = PIPELINES[name]
    result = p.run(800, parallelism=2)
    ops = result.operators().set_index("uid")
    keyed = set(ops.index[ops.keyed])
    assert keyed == set(p.keyed_state)
    assert set(result.outputs) == set(p.outputs)
    declared = {(op, s) for op, states in p.keyed_state.items() for s in states}
    live = {
        (op, name)
        for st in result.runtime.subtasks
        if st.operator.keyed
        for op, name in ((st.spec.uid, n) for n in st.operator.backend.tables)
    }
    assert live == declared
    for tag in p.side_outputs:
        assert isinstance(result.side_output(tag), list)


def test_sample_keys_skew():
    rng = np.random.default_rng(0)
    keys = [f"k{i}" for i in range(100)]
    drawn = sample_keys(rng, 50_000, keys, zipf_s=1.1, hot_keys=("hot-a", "hot-b"), hot_share=0.3)
    c = Counter(drawn.tolist())
    assert abs(c["hot-a"] / 50_000 - 0.15) < 0.01 and abs(c["hot-b"] / 50_000 - 0.15) < 0.01
    assert c["k0"] > c["k1"] > c["k10"]
    uniform = Counter(sample_keys(rng, 50_000, keys, zipf_s=0, hot_keys=(), hot_share=0.2).tolist())
    assert max(uniform.values()) < 2 * min(uniform.values())
    assert planted_keys_dominate(1000, 1.1, ("h",), 0.2)
    assert not planted_keys_dominate(1000, 1.1, ("h1", "h2"), 0.2)
    with pytest.raises(ValueError):
        sample_keys(rng, 10, keys, hot_share=1.5)


def test_arrival_order_is_bounded_and_per_key_ordered():
    rng = np.random.default_rng(1)
    ts = np.sort(rng.integers(0, 100_000, 5000))
    keys = np.array([f"k{i}" for i in rng.integers(0, 7, 5000)], dtype=object)
    order, ts_a = arrival_order(rng, ts, keys, 500)
    assert sorted(order.tolist()) == list(range(5000))
    assert sorted(ts_a.tolist()) == ts.tolist()
    running_max = np.maximum.accumulate(ts_a)
    assert (running_max - ts_a).max() < 500
    assert (running_max - ts_a).max() > 0
    for k in set(keys.tolist()):
        t = ts_a[keys[order] == k]
        assert (np.diff(t) >= 0).all()


def test_run_uses_a_replay_clock_for_dedup():
    assert isinstance(PIPELINES["dedup"].make_env(2).clock, ReplayClock)
    assert not isinstance(PIPELINES["sessions"].make_env().clock, ReplayClock)


@pytest.mark.parametrize("name", [n for n in NAMES if PIPELINES[n].keyed_state])
def test_the_engine_sees_the_planted_keys_as_heavy_hitters(name):
    p = PIPELINES[name]
    result = p.run(20_000, parallelism=3)
    for op in p.keyed_state:
        top = result.heavy_hitters(op, n=len(p.hot_keys))
        assert set(top.key) == set(p.hot_keys), op


@pytest.mark.parametrize("name", NAMES)
def test_same_results_on_every_backend(name, backend_kind, tmp_path):
    p = PIPELINES[name]
    records = p.generate(1500, seed=13)
    reference = p.run(records=records, parallelism=1)
    result = p.run(records=records, parallelism=3,
                   env_options={"state_backend": backend_kind, "state_dir": tmp_path})
    for out in p.outputs:
        assert Counter(result.output(out)) == Counter(reference.output(out)), out
    for tag in p.side_outputs:
        assert Counter(result.side_output(tag)) == Counter(reference.side_output(tag)), tag


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [0, 1, 2])
def test_tiny_inputs(name, n):
    p = PIPELINES[name]
    records = p.generate(n)
    assert len(records) <= n + 4  # fraud may plant a pair, orders make one whole order
    assert n > 0 or records == []
    result = p.run(records=records, parallelism=2)
    assert set(result.outputs) == set(p.outputs)
