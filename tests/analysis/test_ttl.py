"""TTL: expiry times planted with a manual clock come back exactly."""

import numpy as np
import pandas as pd
import pytest

import explorer
from explorer.analysis import expired_not_cleaned, ttl_expiry, ttl_summary, unbounded_growth

from tests.support.fixtures import PLANT_TTL_MS

from tests.support.truth import expiries

HOUR = 3_600_000


@pytest.fixture(scope="module")
def snap(planted_ttl):
    return explorer.open(planted_ttl.savepoint)


def _ms(ts) -> int:
    return int(pd.Timestamp(ts).value // 1_000_000)


def test_expires_at_is_last_record_plus_ttl(snap, planted_ttl):
    df = snap.keyed_state(state="last_seen")
    got = {k: _ms(t) for k, t in zip(df["key"], df["expires_at"])}
    assert got == expiries(planted_ttl.records)


def test_expired_not_cleaned_at_the_snapshot_time(snap, planted_ttl):
    now = _ms(snap.created_at)
    assert now == planted_ttl.records[-1][1]  # the clock followed the records
    exp = expiries(planted_ttl.records)
    expected = sum(1 for t in exp.values() if t <= now)
    assert expected > 0  # the planted input spans more than an hour
    e = snap.expired_not_cleaned().set_index("state")
    assert e.loc["last_seen", "expired_entries"] == expected
    assert e.loc["last_seen", "expired_bytes"] == 8 * expected
    assert e.loc["last_seen", "ttl_ms"] == PLANT_TTL_MS
    assert _ms(e.loc["last_seen", "oldest_expiry"]) == min(exp.values())
    assert "events" not in e.index  # no TTL, never expires


@pytest.mark.parametrize("freq,step", [("1h", HOUR), ("15min", HOUR // 4), ("1d", 24 * HOUR)])
def test_timeline_windows_count_what_expires(snap, planted_ttl, freq, step):
    now = _ms(snap.created_at)
    tl = snap.ttl_expiry(freq=freq)
    assert set(tl["state"]) == {"last_seen"}
    exp = np.array(list(expiries(planted_ttl.records).values()))
    alive = exp[exp > now]
    expect = pd.Series((alive - now) // step).value_counts().sort_index()
    got = tl[tl["status"] == "expiring"].set_index("window")["entries"]
    assert got.to_dict() == expect.to_dict()
    expired = tl[tl["status"] == "expired"]
    assert expired["entries"].sum() == (exp <= now).sum()
    assert tl[tl["status"] == "expiring"]["cum_entries"].iloc[-1] == len(alive)
    first = tl[tl["status"] == "expiring"].iloc[0]
    assert _ms(first["window_start"]) == now + first["window"] * step


def test_a_later_now_expires_more(snap, planted_ttl):
    now = _ms(snap.created_at) + 30 * 60_000
    tl = snap.ttl_expiry(now=pd.Timestamp(now, unit="ms", tz="UTC"), freq="10min")
    exp = np.array(list(expiries(planted_ttl.records).values()))
    assert tl.loc[tl["status"] == "expired", "entries"].sum() == (exp <= now).sum()
    assert tl.loc[tl["status"] == "expiring", "entries"].sum() == (exp > now).sum()
    capped = snap.ttl_expiry(now=now, freq="10min", horizon="20min")
    assert capped.loc[capped["status"] == "expiring", "window"].max() <= 1


def test_boundary_is_expired_at_exactly_expires_at(snap):
    df = snap.keyed_state(state="last_seen")
    t = _ms(df["expires_at"].min())
    at = expired_not_cleaned(snap, now=t).set_index("state").loc["last_seen", "expired_entries"]
    before = expired_not_cleaned(snap, now=t - 1).set_index("state").loc["last_seen", "expired_entries"]
    assert at == before + (df["expires_at"] == df["expires_at"].min()).sum()


def test_summary_lists_states_without_ttl(snap):
    s = ttl_summary(snap).set_index("state")
    assert pd.isna(s.loc["events", "ttl_ms"]) and s.loc["last_seen", "ttl_ms"] == PLANT_TTL_MS
    assert s.loc["events", "expired_entries"] == 0 and s.loc["events", "entries"] == 1500


def test_unbounded_growth_over_the_checkpoints(planted_job):
    ug = unbounded_growth(planted_job.checkpoint_dir).set_index("state")
    assert ug.loc["events", "unbounded"] and ug.loc["events", "monotonic"]
    assert ug.loc["events", "entries_growth"] > 0
    assert not ug.loc["last_seen", "unbounded"]  # it has a TTL
    chks = explorer.snapshot.checkpoints_in(planted_job.checkpoint_dir)
    ug2 = unbounded_growth([*chks, planted_job.savepoint]).set_index("state")
    assert ug2.loc["events", "last_entries"] == 1500


def test_dataframe_input_uses_latest_access_as_now(snap):
    df = snap.keyed_state()
    tl = ttl_expiry(df)
    assert tl.loc[tl["status"] == "expired", "entries"].sum() == snap.ttl_expiry().loc[
        lambda x: x.status == "expired", "entries"].sum()
