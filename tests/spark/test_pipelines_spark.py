"""Every example pipeline on Spark gives the engine's outputs, record for record, on the same input.

One Spark run per pipeline (session-scoped); each is compared with the engine over the same
records, every output and side output. Input files are read in order
(:func:`explorer.spark_engine.adapter.in_file_order`), so the comparison is exact, not up to order.
"""

from __future__ import annotations

import collections

import pytest

from explorer.engine.operator_state import OperatorStateStore
from explorer.errors import JobError, StateError
from explorer.pipelines import PIPELINES, fraud
from explorer.spark_engine.context import ProcessContext, TimerService

pytestmark = pytest.mark.spark

N = 900

#: fraud's rules as a broadcast input: one the detector ignores, and its own rule at version 2
RULE_V2 = fraud.Rule(small_below=2.0, large_above=400.0, window_ms=90_000, version=2)
RULES = (fraud.Rule(name="other", small_below=100.0), RULE_V2)


class Compared:
    def __init__(self, run, engine):
        self.run, self.engine = run, engine


def _generate(name):
    if name == "fraud":  # more planted patterns than the default share, so there are alerts to compare
        return fraud.generate(N, seed=4, fraud_share=0.02, near_miss_share=0.01)
    return PIPELINES[name].generate(N, seed=4)


@pytest.fixture(scope="session")
def pipeline_runs(spark, tmp_path_factory):
    from explorer.spark import engine_outputs, run_on_spark

    cache = {}

    def get(name, monkeypatch=None):
        if name not in cache:
            records = _generate(name)
            options = {"rules": RULES} if name == "fraud" else {}
            run = run_on_spark(name, records, out=tmp_path_factory.mktemp(name), files=3, **options)
            if name == "fraud":
                # the oracle: the engine with the v2 rule in force from the first transaction (Spark applies
                # a broadcast row from its micro-batch on, here the first; the engine's scheduling may run a
                # few transactions before the rules stream reaches the operator)
                mp = pytest.MonkeyPatch()
                mp.setattr(fraud, "DEFAULT_RULE", RULE_V2)
                try:
                    engine = engine_outputs(name, records, rules=RULES)
                finally:
                    mp.undo()
            else:
                engine = engine_outputs(name, records)
            cache[name] = Compared(run, engine)
        return cache[name]

    return get


@pytest.mark.parametrize("name", ["url_counts", "sessions", "fraud", "dedup", "orders", "consumer_lag"])
def test_pipeline_on_spark_same_outputs_as_engine(pipeline_runs, name):
    c = pipeline_runs(name)
    pipe = PIPELINES[name]
    assert set(c.run.outputs) == set(pipe.outputs) | set(pipe.side_outputs)
    for out in c.engine:
        assert len(c.engine[out]) > 0, out
    assert c.run.differences(c.engine) == {}
    assert c.run.batches >= 3


def test_orders_side_outputs_reach_their_own_folders(pipeline_runs):
    c = pipeline_runs("orders")
    assert len(c.run.outputs["illegal"]) > 0 and len(c.run.outputs["stuck"]) > 0
    assert list(c.run.outputs["illegal"].columns) == ["order_id", "ts", "from_status", "to_status"]
    out_dir = c.run.runs[0].output_dir
    assert sorted(p.name for p in out_dir.glob("output=*")) == ["output=illegal", "output=main", "output=stuck"]


def test_end_of_input_fires_the_last_timers(pipeline_runs):
    """Each user's last session is closed by a timer past the last event, which only the
    end-of-input marker's watermark reaches (as the engine's final watermark does)."""
    from explorer.pipelines.sessions import SESSION_GAP_MS

    c = pipeline_runs("sessions")
    last = max(e.ts for e in c.run.records)
    closed_at_end = c.run.outputs["sessions"].end_ms + SESSION_GAP_MS > last
    assert closed_at_end.any()


def test_fraud_rules_come_from_the_broadcast_input(pipeline_runs):
    c = pipeline_runs("fraud")
    alerts = c.run.outputs["alerts"]
    assert set(alerts.rule_version) == {2} and set(alerts.rule) == {fraud.RULE_NAME}
    assert (alerts.amount > RULE_V2.large_above).all()


def test_dedup_ttl_on_event_time_reemits_expired_ids(pipeline_runs):
    c = pipeline_runs("dedup")
    counts = collections.Counter(c.run.outputs["unique"].event_id)
    assert max(counts.values()) > 1  # an id seen again after its 24 h expired counts as new, as on the engine


def test_spark_checkpoints_of_the_pipelines_open(pipeline_runs):
    import explorer

    # at the end of input every flag's timer has fired and cleared flag and timer: the merchants remain
    for name, states in [("orders", {"order"}), ("fraud", {"merchants"})]:
        c = pipeline_runs(name)
        (uid, ckpt), = c.run.checkpoints.items()
        df = explorer.open(ckpt).keyed_state()
        assert set(df.state) == states, (name, set(df.state))
        assert df.key.nunique() > 10


# --- without Spark: what the function sees ---------------------------------------------------------------
def test_broadcast_state_is_read_only_on_the_data_side():
    ctx = ProcessContext(TimerService(None, "event"))
    with pytest.raises(JobError, match="no broadcast input"):
        ctx.get_broadcast_state(fraud.RULES)
    ctx.broadcast = OperatorStateStore()
    ctx.broadcast_side = True
    ctx.get_broadcast_state(fraud.RULES)[fraud.RULE_NAME] = RULE_V2
    ctx.broadcast_side = False
    rules = ctx.get_broadcast_state(fraud.RULES)
    assert rules.get(fraud.RULE_NAME) == RULE_V2
    with pytest.raises(StateError, match="read-only on the data side"):
        rules[fraud.RULE_NAME] = fraud.DEFAULT_RULE


def test_side_outputs_must_be_declared():
    ctx = ProcessContext(TimerService(None, "event"), ["illegal"])
    ctx.output("illegal", 1)
    with pytest.raises(JobError, match="side output 'stuck' is not declared"):
        ctx.output("stuck", 2)
    assert ctx.drain_side() == [("illegal", 1)] and ctx.drain_side() == []


def test_broadcast_state_is_in_operator_state(pipeline_runs):
    """fraud's rules, kept by every bucket like every Flink subtask keeps them, read back as broadcast state."""
    import explorer

    c = pipeline_runs("fraud")
    (uid, ckpt), = c.run.checkpoints.items()
    snap = explorer.open(ckpt)
    ops = snap.operator_state()
    assert len(ops) and set(ops["mode"]) == {"BROADCAST"} and set(ops["state"]) == {fraud.RULES.name}
    assert set(ops["subtask"]) <= set(range(snap.operators["parallelism"].iloc[0]))
    for _, g in ops.groupby("subtask"):  # each partition's copy: both rules, the detector's at version 2
        assert sorted(g["user_key"]) == sorted(r.name for r in RULES)
        mine = g[g["user_key"] == fraud.RULE_NAME]["value"].iloc[0]
        assert mine["version"] == 2 and mine["large_above"] == RULE_V2.large_above
    assert not snap.notes or all("broadcast" not in n for n in snap.notes)
    assert set(snap.keyed_state()["state"]) == {"merchants"}  # broadcast state is not keyed state
