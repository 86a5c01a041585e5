"""The fraud detector: a tiny transaction, then a large one at a new merchant, within a minute.

Flink's classic walkthrough, with the seed's "new merchant" twist and rules
that change at runtime. Per account (keyed state of operator ``fraud-detector``):

* ``flag`` ``ValueState[bool]``: the last transaction was small (below the
  rule's ``small_below``, 1.00 by default);
* ``timer`` ``ValueState[int]``: when the flag expires (a timer ``window_ms``
  after the small transaction clears it, as in Flink's tutorial; event time
  by default, processing time with ``time_domain="processing_time"``);
* ``merchants`` ``MapState[str, int]``: transactions per merchant seen so far,
  which tells a *new* merchant from a known one.

An :class:`Alert` is raised when a flagged account's very next transaction is
large (above ``large_above``, 500.00 by default), earlier than the flag's
expiry, at a merchant the account has never paid before. Any next
transaction clears the flag.

Rules come from a second, broadcast stream into broadcast state
``MapStateDescriptor("rules", str, Rule)``; :class:`FraudDetector` is a
``KeyedBroadcastProcessFunction`` that reads the rule named
``small-then-large`` (falling back to :data:`DEFAULT_RULE`) for every
transaction. As in Flink, a rule applies to the transactions processed after
it arrived. The rules source has no watermarks: the operator's event time is
the minimum over its inputs, so the rules hold it back until their (bounded)
source ends, which here is at once; an endless rules stream would stall the
flag timers, as it does in Flink unless the rules input is marked idle.

::

    source "transactions" (event time) -> key_by(account_id) --+
                                                               +-> process "fraud-detector" -> collect "alerts"
    source "rules" -> broadcast(rules) ------------------------+
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..engine import (
    EVENT_TIME,
    PROCESSING_TIME,
    KeyedBroadcastProcessFunction,
    MapStateDescriptor,
    StreamEnvironment,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from ..engine.sources import CollectionSource
from ._common import DEFAULT_START_MS, HOUR, MINUTE, arrival_order, as_source, key_names, sample_keys

__all__ = [
    "Alert",
    "DEFAULT_RULE",
    "FraudDetector",
    "RULES",
    "RULE_NAME",
    "Rule",
    "Transaction",
    "build",
    "generate",
]

MAX_OUT_OF_ORDERNESS_MS = 2_000
HOT_KEYS = ("acct-merchant-gateway",)
DEFAULT_RECORDS = 50_000
RULE_NAME = "small-then-large"


@dataclass(frozen=True, slots=True)
class Transaction:
    account_id: str
    ts: int
    amount: float
    merchant: str


@dataclass(frozen=True, slots=True)
class Rule:
    """Thresholds of the small-then-large pattern; ``version`` grows with every change."""

    name: str = RULE_NAME
    small_below: float = 1.00
    large_above: float = 500.00
    window_ms: int = MINUTE
    version: int = 1


@dataclass(frozen=True, slots=True)
class Alert:
    account_id: str
    ts: int
    amount: float
    merchant: str
    rule: str
    rule_version: int


DEFAULT_RULE = Rule()

#: the broadcast state the rules live in
RULES = MapStateDescriptor("rules", str, Rule)


def timestamp_of(tx: Transaction) -> int:
    return tx.ts


class FraudDetector(KeyedBroadcastProcessFunction):
    """Small-then-large at a new merchant within the rule's window, per account.

    ``time_domain`` says which clock measures the window: ``"event_time"``
    (the transactions' timestamps; results do not depend on how fast the job
    runs) or ``"processing_time"`` (the engine's clock, as in Flink's
    walkthrough; results then depend on when records are processed).
    """

    FLAG = ValueStateDescriptor("flag", bool)
    TIMER = ValueStateDescriptor("timer", int)
    MERCHANTS = MapStateDescriptor("merchants", str, int)

    def __init__(self, time_domain: str = EVENT_TIME) -> None:
        if time_domain not in (EVENT_TIME, PROCESSING_TIME):
            raise ValueError(f"time_domain must be {EVENT_TIME!r} or {PROCESSING_TIME!r}, found {time_domain!r}")
        self.time_domain = time_domain

    def open(self, ctx):
        self.flag = ctx.get_state(self.FLAG)
        self.timer = ctx.get_state(self.TIMER)
        self.merchants = ctx.get_map_state(self.MERCHANTS)

    def _now(self, tx: Transaction, ctx) -> int:
        if self.time_domain == EVENT_TIME:
            return tx.ts
        return ctx.timer_service().current_processing_time()

    def process_element(self, tx: Transaction, ctx, out):
        rule = ctx.get_broadcast_state(RULES).get(RULE_NAME) or DEFAULT_RULE
        now = self._now(tx, ctx)
        seen = self.merchants.get(tx.merchant, 0)
        if self.flag.value(False):
            expires = self.timer.value()
            # compare with the flag's expiry too: its timer may not have fired yet
            if tx.amount > rule.large_above and seen == 0 and (expires is None or now < expires):
                out.collect(Alert(tx.account_id, tx.ts, tx.amount, tx.merchant, rule.name, rule.version))
            self._clean_up(ctx)
        if tx.amount < rule.small_below:
            self.flag.update(True)
            expires = now + rule.window_ms
            if self.time_domain == EVENT_TIME:
                ctx.timer_service().register_event_time_timer(expires)
            else:
                ctx.timer_service().register_processing_time_timer(expires)
            self.timer.update(expires)
        self.merchants[tx.merchant] = seen + 1

    def on_timer(self, timestamp: int, ctx, out):
        if self.timer.value() == timestamp:
            self.timer.clear()
            self.flag.clear()

    def process_broadcast_element(self, rule: Rule, ctx, out):
        rules = ctx.get_broadcast_state(RULES)
        current = rules.get(rule.name)
        if current is None or rule.version >= current.version:
            rules[rule.name] = rule

    def _clean_up(self, ctx) -> None:
        expires = self.timer.value()
        if expires is not None:
            if self.time_domain == EVENT_TIME:
                ctx.timer_service().delete_event_time_timer(expires)
            else:
                ctx.timer_service().delete_processing_time_timer(expires)
        self.timer.clear()
        self.flag.clear()


# --- input -------------------------------------------------------------------------------
def generate(
    n: int = DEFAULT_RECORDS,
    *,
    keys: int | Sequence[str] = 1000,
    zipf_s: float = 1.1,
    hot_keys: Sequence[str] = HOT_KEYS,
    hot_share: float = 0.2,
    seed: int = 0,
    start_ms: int = DEFAULT_START_MS,
    duration_ms: int = 24 * HOUR,
    fraud_share: float = 0.002,
    near_miss_share: float = 0.002,
    merchants: int = 500,
    max_out_of_orderness_ms: int = MAX_OUT_OF_ORDERNESS_MS,
) -> list[Transaction]:
    """``n`` card transactions over ``duration_ms`` with planted fraud and near misses.

    Background traffic: accounts by the skew model, merchants (Zipf over
    ``merchants``), log-normal amounts clipped to 1.00 .. 480.00, so the
    background alone never looks small or large.
    A share ``fraud_share`` of records starts a planted pattern: a tiny
    amount, then within 5 to 50 seconds a large one at a merchant the account
    never used (``fraud-<seed>-<i>``). ``near_miss_share`` plants the same pattern
    with the large one 61 s to 10 min later, or at the same merchant: these
    must not alert. Planted pairs add two records each beyond ``n``.
    """
    rng = np.random.default_rng(seed)
    accounts = sample_keys(rng, n, key_names(keys, "acct-"), zipf_s=zipf_s, hot_keys=hot_keys, hot_share=hot_share)
    ts = rng.integers(start_ms, start_ms + max(1, duration_ms), n)
    amounts = np.round(rng.lognormal(3.2, 1.1, n), 2)
    amounts = np.clip(amounts, 1.0, 480.0)  # background never small or large on its own
    merch = sample_keys(rng, n, key_names(merchants, "merchant-", 4), zipf_s=0.9, hot_keys=(), hot_share=0.0)
    rows_acct = [accounts]
    rows_ts = [ts]
    rows_amt = [amounts]
    rows_m = [merch]
    n_fraud = int(round(n * fraud_share))
    n_miss = int(round(n * near_miss_share))
    for kind, count in (("fraud", n_fraud), ("miss", n_miss)):
        if not count:
            continue
        acc = accounts[rng.integers(0, n, count)]
        t0 = rng.integers(start_ms, start_ms + max(1, duration_ms), count)
        small = np.round(rng.uniform(0.01, 0.99, count), 2)
        large = np.round(rng.uniform(500.01, 3000.0, count), 2)
        small_m = np.array([f"merchant-{i:04d}" for i in rng.integers(0, 20, count)], dtype=object)
        if kind == "fraud":
            dt = rng.integers(5_000, 50_000, count)
            large_m = np.array([f"fraud-{seed}-{i}" for i in range(count)], dtype=object)
        else:
            late = rng.random(count) < 0.5
            dt = np.where(late, rng.integers(61_000, 10 * MINUTE, count), rng.integers(5_000, 50_000, count))
            large_m = np.where(late, np.array([f"fraud-miss-{seed}-{i}" for i in range(count)], dtype=object), small_m)
        rows_acct += [acc, acc]
        rows_ts += [t0, t0 + dt]
        rows_amt += [small, large]
        rows_m += [small_m, large_m]
    acct = np.concatenate(rows_acct)
    ts_all = np.concatenate(rows_ts)
    amt = np.concatenate(rows_amt)
    m_all = np.concatenate(rows_m)
    arrive, ts_a = arrival_order(rng, ts_all, acct, max_out_of_orderness_ms)
    a, am, mm = acct[arrive].tolist(), amt[arrive].tolist(), m_all[arrive].tolist()
    return [Transaction(a[i], t, float(am[i]), mm[i]) for i, t in enumerate(ts_a.tolist())]


# --- job ---------------------------------------------------------------------------------
def build(
    env: StreamEnvironment,
    records: Sequence[Transaction],
    *,
    rules: Sequence[Rule] = (DEFAULT_RULE,),
    time_domain: str = EVENT_TIME,
    max_out_of_orderness_ms: int = MAX_OUT_OF_ORDERNESS_MS,
    num_splits: int = 1,
) -> None:
    """Wire the job onto ``env``; ``rules`` are what the broadcast stream carries;
    ``time_domain`` measures the flag's window (see :class:`FraudDetector`)."""
    wm = WatermarkStrategy.for_bounded_out_of_orderness(max_out_of_orderness_ms).with_timestamp_assigner(timestamp_of)
    txs = env.from_source(as_source(records, num_splits), wm, name="transactions", uid="transactions")
    rule_stream = env.from_source(CollectionSource(list(rules)), name="rules", uid="rules").broadcast(RULES)
    (
        txs.key_by("account_id")
        .connect(rule_stream)
        .process(FraudDetector(time_domain), name="fraud-detector", uid="fraud-detector")
        .collect("alerts")
    )


def key_of(tx: Transaction) -> str:
    return tx.account_id
