"""Analyses under a memory budget: streamed over key-group ranges, the same answers as in memory.

Each snapshot is opened twice: with the default budget (the analyses load everything) and
with a budget that forces several key-group ranges (:mod:`explorer.analysis._ranges`); every
analysis must give the same frame both ways. Snapshots: the committed samples (real engine
jobs, heap and RocksDB, one with TTL; a real Flink savepoint) and a generated engine
savepoint with many tied keys (:mod:`benchmarks._scale_inputs`).
"""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

import explorer
from explorer import analysis
from explorer.analysis import _columns, _ranges
from explorer.keygroups import key_groups_for
from explorer.stored import ANALYSIS_BYTES_PER_ROW

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ["sample_data/fraud/savepoint-heap", "sample_data/url_counts/savepoint-rocksdb",
           "sample_data/dedup/savepoint-heap", "sample_data/flink/heap-canonical-savepoint"]


def budget_for(path: Path, ranges: int) -> int:
    """A budget that cuts ``path`` into about ``ranges`` key-group ranges."""
    snap = explorer.open(path)
    rows = float(_ranges.rows_per_key_group(snap).sum())
    return max(1, int(rows * ANALYSIS_BYTES_PER_ROW / ranges))


def pair(path: Path, ranges: int = 5):
    """The snapshot in memory and streamed over about ``ranges`` ranges."""
    return explorer.open(path), explorer.open(path, memory_budget=budget_for(path, ranges))


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    from benchmarks._scale_inputs import engine_savepoint

    cache = tmp_path_factory.mktemp("scale")
    return engine_savepoint(30_000, cache=cache, progress=False), engine_savepoint(30_000, variant=True, cache=cache,
                                                                                  progress=False)


def _same(x: pd.DataFrame, y: pd.DataFrame, **kw) -> None:
    assert_frame_equal(x.reset_index(drop=True), y.reset_index(drop=True), **kw)


ANALYSES = {
    "key_group_distribution": lambda s: s.key_group_distribution(),
    "subtask_distribution": lambda s: s.subtask_distribution(),
    "imbalance": lambda s: s.imbalance(),
    "rescale_whatif": lambda s: s.rescale_whatif([1, 2, 3, 5]),
    "rescale_whatif_other_maxp": lambda s: s.rescale_whatif([2, 4], max_parallelism=[s.max_parallelism(), 512]),
    "hot_keys_auto": lambda s: s.hot_keys(7),
    "hot_keys_bytes": lambda s: s.hot_keys(7, by="bytes"),
    "hot_keys_entries": lambda s: s.hot_keys(7, by="entries"),
    "hot_keys_traffic": lambda s: s.hot_keys(7, by="traffic"),
    "key_skew": lambda s: s.key_skew(),
    "key_skew_bytes": lambda s: s.key_skew(by="bytes"),
    "salting_whatif": lambda s: s.salting_whatif(n=4),
    "ttl_expiry": lambda s: s.ttl_expiry(freq="1h"),
    "expired_not_cleaned": lambda s: s.expired_not_cleaned(),
    "ttl_summary": lambda s: s.ttl_summary(),
    "state_sizes": lambda s: s.state_sizes(),
    "history": lambda s: analysis.history([s]),
}


@pytest.mark.parametrize("sample", SAMPLES)
def test_streamed_answers_equal_the_in_memory_ones(sample):
    a, b = pair(ROOT / sample)
    assert _ranges.needs_ranges(b) and len(_ranges.plan([b])) >= 3
    for name, fn in ANALYSES.items():
        _same(fn(a), fn(b), check_exact=False, rtol=1e-9, obj=f"{sample}: {name}")
    assert not b.analysis_cache.loaded  # never loaded whole


def test_generated_snapshot_with_ties_ranks_alike(generated):
    a, b = pair(generated[0], ranges=7)
    for name in ("key_group_distribution", "hot_keys_bytes", "hot_keys_entries", "hot_keys_traffic", "key_skew",
                 "salting_whatif", "ttl_expiry", "expired_not_cleaned", "rescale_whatif_other_maxp"):
        _same(ANALYSES[name](a), ANALYSES[name](b), check_exact=False, rtol=1e-9, obj=name)
    top = b.hot_keys(50, by="bytes")
    assert top["bytes"].nunique() < 50  # ties at the cut, ranked by entries then key alike


def test_salting_given_keys_streamed(generated):
    a, b = pair(generated[0], ranges=6)
    keys = list(a.hot_keys(3, by="traffic")["key"])
    _same(a.salting_whatif(keys, n=3), b.salting_whatif(keys, n=3))


def _by_key(d: pd.DataFrame) -> pd.DataFrame:
    return d.sort_values(["operator", "state", "key"], kind="stable").reset_index(drop=True)


@pytest.mark.parametrize("unchanged", [True, False])
def test_diff_streamed_range_by_range(generated, unchanged):
    base, variant = generated
    budget = budget_for(base, 4)
    x = analysis.diff(explorer.open(base), explorer.open(variant), unchanged=unchanged)
    y = analysis.diff(explorer.open(base, memory_budget=budget), explorer.open(variant, memory_budget=budget),
                      unchanged=unchanged)
    assert set(x["status"]) >= {"added", "removed", "changed"}
    _same(_by_key(x), _by_key(y))
    assert all(g.is_monotonic_decreasing for _, g in y.groupby(["operator", "state"])["bytes_delta"])


def test_diff_of_checkpoints_streamed():
    chks = sorted(glob.glob(str(ROOT / "sample_data/url_counts/checkpoints/chk-*")))
    x = analysis.diff(explorer.open(chks[0]), explorer.open(chks[-1]))
    budget = budget_for(Path(chks[-1]), 4)
    y = analysis.diff(explorer.open(chks[0], memory_budget=budget), explorer.open(chks[-1], memory_budget=budget))
    _same(_by_key(x), _by_key(y))


def test_history_of_checkpoints_streamed():
    chks = sorted(glob.glob(str(ROOT / "sample_data/url_counts/checkpoints/chk-*")))
    budget = budget_for(Path(chks[-1]), 4)
    _same(analysis.history([explorer.open(c) for c in chks]),
          analysis.history([explorer.open(c, memory_budget=budget) for c in chks]))


def test_plan_covers_every_key_group_once_within_the_budget(generated):
    snap = explorer.open(generated[0])
    rows = _ranges.rows_per_key_group(snap)
    assert rows.sum() == pytest.approx(snap.reader.estimated_rows(snap.query()))
    budget = budget_for(generated[0], 9)
    plan = _ranges.plan([snap], budget=budget)
    assert plan[0][0] == 0 and plan[-1][1] == snap.max_parallelism() - 1
    assert all(b[0] == a[1] + 1 for a, b in zip(plan, plan[1:]))
    for lo, hi in plan:
        assert lo == hi or rows[lo: hi + 1].sum() * ANALYSIS_BYTES_PER_ROW <= budget


def test_a_range_view_reads_its_key_groups_only(generated):
    snap = explorer.open(generated[0])
    v = _ranges.view(snap, 10, 19)
    df = v.keyed_state()
    assert len(df) and df["key_group"].between(10, 19).all()
    assert len(df) == len(snap.keyed_state(key_groups=range(10, 20)))
    m = v.metrics()
    assert set(m["key_group"]) == set(range(10, 20))
    hh = v.heavy_hitters()
    assert len(hh) < len(snap.heavy_hitters())
    assert np.isin(key_groups_for(list(hh["key"]), snap.max_parallelism()), range(10, 20)).all()


def test_the_budget_only_streams_what_does_not_fit(generated):
    assert not _ranges.needs_ranges(explorer.open(generated[0]))  # the default: half the memory available
    assert explorer.open(generated[0], memory_budget="64KB").memory_budget == 64 * 1024
    assert explorer.open(generated[0], memory_budget="1.5GB").memory_budget == int(1.5 * (1 << 30))
    small = explorer.open(generated[0], memory_budget=budget_for(generated[0], 4))
    assert _ranges.needs_ranges(small)
    small.hot_keys()  # streamed ...
    assert not small.analysis_cache.loaded
    small.keyed_state(unbounded=True)
    explorer.analysis.key_stats(small)  # ... and once the columns are loaded anyway, they are used
    assert small.analysis_cache.loaded and not _ranges.needs_ranges(small)


@pytest.mark.parametrize("bad", [0, -5, "lots", True])
def test_a_bad_budget_is_refused(bad, generated):
    with pytest.raises(ValueError, match="memory_budget"):
        explorer.open(generated[0], memory_budget=bad)


def test_ranges_numbered_by_the_key_kernel_answer_alike(generated, monkeypatch):
    """The numba key numbering and per-key sums (taken from 2**18 rows of a range; here from any) change no
    answer."""

    whole, other = explorer.open(generated[0]), explorer.open(generated[1])
    want = {name: f(whole) for name, f in ANALYSES.items() if name in ("key_group_distribution", "imbalance")}
    want["hot_keys"] = whole.hot_keys(10, by="bytes")
    want["diff"] = explorer.diff(whole, other, unchanged=False)
    from explorer.analysis import _common

    monkeypatch.setattr(_columns, "KERNEL_ROWS", 0)
    monkeypatch.setattr(_common, "KERNEL_ROWS", 0)
    budget = budget_for(generated[0], 5)
    snap, snap_b = explorer.open(generated[0], memory_budget=budget), explorer.open(generated[1], memory_budget=budget)
    assert _ranges.needs_ranges(snap)
    _same(snap.key_group_distribution(), want["key_group_distribution"])
    _same(snap.imbalance(), want["imbalance"])
    _same(snap.hot_keys(10, by="bytes"), want["hot_keys"])
    _same(_by_key(explorer.diff(snap, snap_b, unchanged=False)), _by_key(want["diff"]))


def test_a_key_pass_range_loads_its_columns_and_a_diff_range_its_entries(generated):
    from explorer.analysis._columns import cached_frame
    from explorer.analysis._common import KEY_PASS_COLUMNS

    snap = explorer.open(generated[0])
    v = _ranges.view(snap, 10, 19, columns=KEY_PASS_COLUMNS)
    df = cached_frame(v)
    assert {"last_access", "expires_at", "subtask"}.isdisjoint(df.columns)
    assert v.analysis_cache.row_hashes is None  # no entries read for a question that does not need them
    full = cached_frame(_ranges.view(snap, 10, 19))
    assert (df["size_bytes"].to_numpy() == full["size_bytes"].to_numpy()).all()
    d = _ranges.view(snap, 10, 19, entries=True)
    cached_frame(d)
    assert d.analysis_cache.row_hashes is not None  # the diff's ranges hash the entries as they load


def test_a_pass_ahead_plans_at_half_the_budget_and_hands_over_loaded_views(generated):
    """``ahead``: two ranges in memory at a time, so each within half the budget; every view handed over has its
    columns loaded already (on a background thread), the same rows as a view loaded in place."""
    from explorer.analysis._columns import cached_frame
    from explorer.analysis._common import KEY_PASS_COLUMNS

    budget = budget_for(generated[0], 4)
    snap = explorer.open(generated[0], memory_budget=budget)
    plain = _ranges.ranges("keys", snap, columns=KEY_PASS_COLUMNS)
    ahead = _ranges.ranges("keys", snap, columns=KEY_PASS_COLUMNS, ahead=True, load=_columns.load)
    assert ahead.ranges == _ranges.plan([snap], budget=budget // 2) and len(ahead.ranges) > len(plain.ranges)
    rows = _ranges.rows_per_key_group(snap)
    seen = []
    for (v,) in ahead:
        assert v.analysis_cache.loaded
        lo, hi = v.reader.lo, v.reader.hi
        assert lo == hi or rows[lo: hi + 1].sum() * ANALYSIS_BYTES_PER_ROW <= budget // 2
        mine = cached_frame(_ranges.view(snap, lo, hi, columns=KEY_PASS_COLUMNS))
        _same(cached_frame(v), mine)
        seen.append((lo, hi))
    assert seen == ahead.ranges


def _damage_range(monkeypatch, bad_lo: int) -> None:
    """Loading the range that starts at key group ``bad_lo`` raises, as a damaged file would."""
    from explorer.errors import SnapshotCorruptError

    real = _columns._load

    def load(s):
        if s.reader.lo == bad_lo:
            raise SnapshotCorruptError("damaged range")
        return real(s)

    monkeypatch.setattr(_columns, "_load", load)


def test_a_pass_ahead_raises_a_ranges_read_error_and_may_stop_early(generated, monkeypatch):
    from explorer.errors import SnapshotCorruptError

    snap = explorer.open(generated[0], memory_budget=budget_for(generated[0], 6))
    p = _ranges.ranges("keys", snap, ahead=True, load=_columns.load)
    assert len(p.ranges) > 3
    got = next(iter(p))  # stopping after the first range: the second's load is waited for, not leaked
    assert got[0].analysis_cache.loaded
    it = iter(p)
    next(it)
    it.close()
    _damage_range(monkeypatch, p.ranges[2][0])
    with pytest.raises(SnapshotCorruptError, match="damaged range"):
        for _ in _ranges.ranges("keys", snap, ahead=True, load=_columns.load):
            pass
    with pytest.raises(SnapshotCorruptError, match="damaged range"):
        snap.key_group_distribution()


def test_a_pass_mapped_two_ranges_at_a_time_answers_in_range_order(generated, monkeypatch):
    """``map`` with ``ahead``: ``fn`` of each range on two threads, answers in range order, a range's error
    raised in its turn; ``prepare`` runs on the loading thread before the view is handed over."""
    from explorer.errors import SnapshotCorruptError

    snap = explorer.open(generated[0], memory_budget=budget_for(generated[0], 6))
    p = _ranges.ranges("keys", snap, ahead=True, load=_columns.load)
    got = list(p.map(lambda v: (v.reader.lo, v.reader.hi, len(v.keyed_state()))))
    assert [(lo, hi) for lo, hi, _ in got] == p.ranges
    assert sum(n for _, _, n in got) == len(explorer.open(generated[0]).keyed_state())
    seen = []
    prepared = _ranges.ranges("keys", snap, ahead=True, load=_columns.load,
                              prepare=lambda v: seen.append((v.reader.lo, v.analysis_cache.loaded)))
    for (v,) in prepared:
        assert (v.reader.lo, True) in seen
    assert sorted(seen) == [(lo, True) for lo, _ in prepared.ranges]
    _damage_range(monkeypatch, p.ranges[3][0])
    done = []
    with pytest.raises(SnapshotCorruptError, match="damaged range"):
        for lo in _ranges.ranges("keys", snap, ahead=True).map(lambda v: (_columns._cache(v), v.reader.lo)[1]):
            done.append(lo)
    assert done == [lo for lo, _ in p.ranges[:3]]


def test_ranges_of_sorted_files_numbered_by_the_merge_answer_as_the_hash_table(generated, monkeypatch):
    """The generated savepoints' files are sorted by key group and key: their ranges' keys are numbered by a
    merge (:func:`explorer.analysis._key_kernels.number_sorted`, checked as it goes). Hot keys (ties at the
    cut ordered by key text), by traffic too, and the streamed diff's whole frame (keys on one side only,
    changed values) are those of the hash table's numbering."""
    from explorer.analysis import _common, _key_kernels

    monkeypatch.setattr(_columns, "KERNEL_ROWS", 0)
    monkeypatch.setattr(_common, "KERNEL_ROWS", 0)
    budget = budget_for(generated[0], 5)

    def answers():
        snap, snap_b = (explorer.open(p, memory_budget=budget) for p in generated)
        assert _ranges.needs_ranges(snap)
        return (snap.hot_keys(10, by="bytes"), snap.hot_keys(10, by="traffic"), snap.hot_keys(25, by="entries"),
                explorer.diff(snap, snap_b, unchanged=True))

    merged = []
    merge = _key_kernels.number_sorted
    monkeypatch.setattr(_key_kernels, "number_sorted", lambda *a: merged.append(merge(*a)) or merged[-1])
    got = answers()
    assert merged and min(merged) > 0  # every range was numbered by the merge
    monkeypatch.setattr(_columns, "_numbered_in_order", lambda *a: (-1, None))
    want = answers()
    for g, w in zip(got, want):
        _same(g, w)


def test_a_streamed_diffs_ranges_read_no_last_access_expiry_or_subtask(generated, monkeypatch):
    """A diff looks at keys, key groups, sizes and the entries: its ranges load no more (same answer: the
    streamed diff tests above)."""
    budget = budget_for(generated[0], 5)
    snap, snap_b = (explorer.open(p, memory_budget=budget) for p in generated)
    seen = []
    load = _columns._load
    monkeypatch.setattr(_columns, "_load", lambda s: seen.append(load(s)) or seen[-1])
    explorer.diff(snap, snap_b, unchanged=False)
    assert len(seen) > 2
    for df, _, hashes in seen:
        assert {"last_access", "expires_at", "subtask"}.isdisjoint(df.columns) and hashes is not None
