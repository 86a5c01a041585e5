"""fraud: hand-built sequences that must and must not alert, and a plain walk over generated input."""

from __future__ import annotations

from collections import Counter

import pytest

from explorer.engine import StreamEnvironment
from explorer.pipelines import fraud
from explorer.pipelines.fraud import Alert, Rule, Transaction

T0 = 1_767_258_000_000
SEC = 1_000


def run(txs, parallelism=1, rules=(fraud.DEFAULT_RULE,), **env_kw):
    env = StreamEnvironment(parallelism=parallelism, **env_kw)
    fraud.build(env, txs, rules=rules)
    return env.execute("fraud")


def alerts_of(txs, **kw):
    return [(a.account_id, a.ts, a.amount, a.merchant) for a in run(txs, **kw).output("alerts")]


def expected_alerts(txs, rule=fraud.DEFAULT_RULE):
    """The rule as a plain walk over each account's transactions in input order."""
    flagged_until: dict[str, int] = {}
    merchants: dict[str, set] = {}
    out = []
    for tx in txs:
        seen = merchants.setdefault(tx.account_id, set())
        until = flagged_until.pop(tx.account_id, None)
        if until is not None and tx.ts < until and tx.amount > rule.large_above and tx.merchant not in seen:
            out.append((tx.account_id, tx.ts, tx.amount, tx.merchant))
        if tx.amount < rule.small_below:
            flagged_until[tx.account_id] = tx.ts + rule.window_ms
        seen.add(tx.merchant)
    return out


def tx(ts_s, amount, merchant, account="acct-1"):
    return Transaction(account, T0 + int(ts_s * SEC), amount, merchant)


MUST_ALERT = {
    "small then large at a new merchant": [tx(0, 0.50, "coffee"), tx(30, 600.00, "jeweller")],
    "just inside the minute": [tx(0, 0.99, "coffee"), tx(59.999, 500.01, "jeweller")],
    "after history at other merchants": [tx(0, 20.0, "grocer"), tx(10, 0.10, "grocer"), tx(20, 900.0, "jeweller")],
}
MUST_NOT_ALERT = {
    "large after the minute": [tx(0, 0.50, "coffee"), tx(60, 600.00, "jeweller")],
    "large long after": [tx(0, 0.50, "coffee"), tx(3600, 600.00, "jeweller")],
    "merchant already used": [tx(0, 50.0, "jeweller"), tx(10, 0.50, "coffee"), tx(20, 600.0, "jeweller")],
    "same merchant as the small one": [tx(0, 0.50, "jeweller"), tx(20, 600.0, "jeweller")],
    "not small: exactly 1.00": [tx(0, 1.00, "coffee"), tx(20, 600.0, "jeweller")],
    "not large: exactly 500.00": [tx(0, 0.50, "coffee"), tx(20, 500.00, "jeweller")],
    "something in between": [tx(0, 0.50, "coffee"), tx(10, 20.0, "grocer"), tx(20, 600.0, "jeweller")],
    "large first, then small": [tx(0, 600.0, "jeweller"), tx(10, 0.50, "coffee")],
    "different accounts": [tx(0, 0.50, "coffee", "acct-1"), tx(20, 600.0, "jeweller", "acct-2")],
}


@pytest.mark.parametrize("name", sorted(MUST_ALERT))
@pytest.mark.parametrize("parallelism", [1, 3])
def test_must_alert(name, parallelism):
    txs = MUST_ALERT[name]
    got = alerts_of(txs, parallelism=parallelism)
    assert len(got) == 1
    assert got == expected_alerts(txs)
    assert got[0][1:] == (txs[-1].ts, txs[-1].amount, txs[-1].merchant)


@pytest.mark.parametrize("name", sorted(MUST_NOT_ALERT))
@pytest.mark.parametrize("parallelism", [1, 3])
def test_must_not_alert(name, parallelism):
    txs = MUST_NOT_ALERT[name]
    assert expected_alerts(txs) == []
    assert alerts_of(txs, parallelism=parallelism) == []


def test_each_account_alerts_on_its_own():
    txs = []
    for i in range(20):
        a = f"acct-{i}"
        txs += [tx(i, 0.5, "coffee", a), tx(i + 10, 700.0, f"new-{i}", a)] if i % 2 else [tx(i, 0.5, "coffee", a)]
    txs.sort(key=lambda t: t.ts)
    for p in (1, 3):
        got = alerts_of(txs, parallelism=p)
        assert Counter(got) == Counter(expected_alerts(txs))
        assert {g[0] for g in got} == {f"acct-{i}" for i in range(1, 20, 2)}


def test_timer_clears_the_flag():
    result = run([tx(0, 0.5, "coffee", "acct-quiet")])
    state = result.state("fraud-detector")
    # the event-time timer fired at the end of input and cleared flag and timer
    assert set(state.state) == {"merchants"}
    assert state.loc[state.state == "merchants", "user_key"].tolist() == ["coffee"]


@pytest.mark.parametrize("parallelism", [1, 3])
def test_generated_input_matches_a_plain_walk(parallelism):
    txs = fraud.generate(6000, keys=60, seed=5, fraud_share=0.01, near_miss_share=0.01)
    got = alerts_of(txs, parallelism=parallelism)
    expected = expected_alerts(txs)
    assert Counter(got) == Counter(expected)
    assert len(expected) > 10
    # every alert is a planted fraud pattern; no near miss alerts
    assert all(m.startswith("fraud-5-") for _, _, _, m in got)


def test_generated_input_independent_of_batching():
    txs = fraud.generate(3000, keys=30, seed=6, fraud_share=0.01)
    assert Counter(alerts_of(txs, batch_size=5)) == Counter(alerts_of(txs, parallelism=3, batch_size=3000))


def test_rules_change_thresholds_at_runtime():
    # filler first, so the broadcast rules have arrived before the transactions that matter
    filler = [tx(i * 0.01, 30.0, "grocer", f"filler-{i}") for i in range(200)]
    pattern = [tx(100, 0.50, "coffee"), tx(110, 150.0, "bookshop")]
    strict = Rule(large_above=100.0, version=2)
    with_default = alerts_of(filler + pattern, batch_size=8)
    assert with_default == []
    for p in (1, 3):
        result = run(filler + pattern, parallelism=p, rules=(fraud.DEFAULT_RULE, strict), batch_size=8)
        assert result.output("alerts") == [Alert("acct-1", pattern[1].ts, 150.0, "bookshop", fraud.RULE_NAME, 2)]
        assert expected_alerts(filler + pattern, strict) == [("acct-1", pattern[1].ts, 150.0, "bookshop")]


def test_an_older_rule_version_does_not_replace_a_newer_one():
    filler = [tx(i * 0.01, 30.0, "grocer", f"filler-{i}") for i in range(200)]
    pattern = [tx(100, 0.50, "coffee"), tx(110, 150.0, "bookshop")]
    rules = (Rule(large_above=100.0, version=3), Rule(large_above=1000.0, version=2))
    assert [a.rule_version for a in run(filler + pattern, rules=rules, batch_size=8).output("alerts")] == [3]


def test_broadcast_state_is_read_only_on_the_data_side():
    from explorer.errors import StateError

    class Writer(fraud.FraudDetector):
        def process_element(self, value, ctx, out):
            ctx.get_broadcast_state(fraud.RULES)["x"] = fraud.DEFAULT_RULE

    env = StreamEnvironment()
    rules = env.from_collection([fraud.DEFAULT_RULE]).broadcast(fraud.RULES)
    env.from_collection([tx(0, 1.0, "m")]).key_by("account_id").connect(rules).process(Writer()).collect("x")
    with pytest.raises(StateError, match="read-only"):
        env.execute()


def test_processing_time_variant_measures_the_window_on_the_clock():
    from explorer.engine.testing import KeyedProcessFunctionHarness, ManualClock

    clock = ManualClock(1_000_000)
    det = fraud.FraudDetector(time_domain="processing_time")
    with KeyedProcessFunctionHarness(det, key_selector=lambda t: t.account_id, clock=clock) as h:
        # event timestamps are irrelevant here: only the clock counts
        h.process_element(tx(0, 0.5, "coffee"))
        assert [(t.domain, t.timestamp) for t in h.timers()] == [("processing_time", 1_060_000)]
        h.advance_processing_time(59_999)
        assert h.process_element(tx(3600, 900.0, "jeweller")) != []  # hour later in event time, 59.999 s on the clock
        h.process_element(tx(3700, 0.5, "coffee"))
        h.advance_processing_time(60_000)  # the processing-time timer clears the flag
        assert h.state("flag") is None and h.timers() == []
        assert h.process_element(tx(3710, 900.0, "watchmaker")) == []
    with pytest.raises(ValueError, match="time_domain"):
        fraud.FraudDetector(time_domain="wall")


def test_processing_time_variant_runs_as_a_job():
    # with a clock that never moves, every flagged account's next large transaction alerts
    from explorer.engine import ManualClock

    txs = [tx(0, 0.5, "coffee"), tx(3600, 900.0, "jeweller")]
    env = StreamEnvironment(clock=ManualClock(0))
    fraud.build(env, txs, time_domain="processing_time")
    assert [a.merchant for a in env.execute().output("alerts")] == ["jeweller"]
    assert alerts_of(txs) == []  # in event time the hour is far too long
