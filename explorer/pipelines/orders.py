"""The order state machine (seed 004): legal transitions update state, illegal ones go aside.

Statuses and the legal moves::

    (new) -> PENDING_PAYMENT -> PAID -> DELIVERED -> ACCEPTED
                   |             |          |
                   +-------------+----------+------> CANCELLED

ACCEPTED and CANCELLED are final: the order's state is cleared, as the seed
describes, so any later event for it is illegal (there is no open order).

:class:`OrderStateMachine` keeps a ``ValueState[Order]`` named ``order`` per
order id and, for every non-final status, an event-time timer at the time
the order counts as stuck (:data:`STUCK_AFTER_MS`). Outputs:

* main output ``orders``: the :class:`Order` after every legal transition;
* side output ``illegal``: an :class:`IllegalTransition` per rejected event;
* side output ``stuck``: a :class:`StuckOrder` when an order stayed in one
  status too long. It is reported once per status, either by the timer or,
  when the next event arrives before the watermark fired the timer, by that
  event, so the report does not depend on how the input was batched.

::

    source "order-events" (event time) -> key_by(order_id) -> process "order-state-machine" -> collect "orders"
                                                               side outputs "illegal", "stuck"
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from ..engine import KeyedProcessFunction, StreamEnvironment, ValueStateDescriptor, WatermarkStrategy
from ._common import DAY, DEFAULT_START_MS, HOUR, MINUTE, arrival_order, as_source, sample_keys

__all__ = [
    "FINAL",
    "IllegalTransition",
    "LEGAL",
    "Order",
    "OrderEvent",
    "OrderStateMachine",
    "STUCK_AFTER_MS",
    "StuckOrder",
    "build",
    "generate",
    "next_status",
]

PENDING_PAYMENT = "PENDING_PAYMENT"
PAID = "PAID"
DELIVERED = "DELIVERED"
ACCEPTED = "ACCEPTED"
CANCELLED = "CANCELLED"
STATUSES = (PENDING_PAYMENT, PAID, DELIVERED, ACCEPTED, CANCELLED)
FINAL = frozenset({ACCEPTED, CANCELLED})

#: legal (from, to) moves; ``None`` is "no open order"
LEGAL: frozenset[tuple[str | None, str]] = frozenset(
    {
        (None, PENDING_PAYMENT),
        (PENDING_PAYMENT, PAID),
        (PAID, DELIVERED),
        (DELIVERED, ACCEPTED),
        (PENDING_PAYMENT, CANCELLED),
        (PAID, CANCELLED),
        (DELIVERED, CANCELLED),
    }
)

#: how long an order may stay in a non-final status before it is reported stuck
STUCK_AFTER_MS = {PENDING_PAYMENT: 30 * MINUTE, PAID: 24 * HOUR, DELIVERED: 3 * DAY}

MAX_OUT_OF_ORDERNESS_MS = 5_000
HOT_KEYS = ("order-replayed-by-buggy-client",)
DEFAULT_RECORDS = 50_000


@dataclass(frozen=True, slots=True)
class OrderEvent:
    """Something happened to an order: it moves to ``status``."""

    order_id: str
    ts: int
    status: str
    amount: float = 0.0


@dataclass(frozen=True, slots=True)
class Order:
    """The state kept per open order."""

    order_id: str
    status: str
    amount: float
    created_ms: int
    updated_ms: int
    stuck_reported: bool = False


@dataclass(frozen=True, slots=True)
class IllegalTransition:
    order_id: str
    ts: int
    from_status: str | None
    to_status: str


@dataclass(frozen=True, slots=True)
class StuckOrder:
    order_id: str
    status: str
    since_ms: int
    deadline_ms: int


def next_status(current: str | None, event_status: str) -> str | None:
    """The status after ``event_status`` arrives in ``current``, or None if illegal."""
    return event_status if (current, event_status) in LEGAL else None


def timestamp_of(event: OrderEvent) -> int:
    return event.ts


class OrderStateMachine(KeyedProcessFunction):
    """Validates and applies order transitions; reports illegal ones and stuck orders."""

    ORDER = ValueStateDescriptor("order", Order)

    def __init__(self, stuck_after_ms: dict[str, int] | None = None) -> None:
        self.stuck_after_ms = dict(STUCK_AFTER_MS if stuck_after_ms is None else stuck_after_ms)

    def open(self, ctx):
        self.order = ctx.get_state(self.ORDER)

    def _deadline(self, order: Order) -> int | None:
        after = self.stuck_after_ms.get(order.status)
        return None if after is None else order.updated_ms + after

    def process_element(self, event: OrderEvent, ctx, out):
        order: Order | None = self.order.value()
        timers = ctx.timer_service()
        if order is not None and not order.stuck_reported:
            deadline = self._deadline(order)
            if deadline is not None and event.ts >= deadline:
                timers.delete_event_time_timer(deadline)
                order = self._report_stuck(order, deadline, ctx)
        current = None if order is None else order.status
        new = next_status(current, event.status)
        if new is None:
            ctx.output("illegal", IllegalTransition(event.order_id, event.ts, current, event.status))
            return
        if order is not None and not order.stuck_reported:
            old_deadline = self._deadline(order)
            if old_deadline is not None:
                timers.delete_event_time_timer(old_deadline)
        if order is None:
            order = Order(event.order_id, new, event.amount, event.ts, event.ts)
        else:
            order = replace(order, status=new, updated_ms=event.ts, stuck_reported=False)
        out.collect(order)
        if new in FINAL:
            self.order.clear()
            return
        deadline = self._deadline(order)
        if deadline is not None:
            timers.register_event_time_timer(deadline)
        self.order.update(order)

    def on_timer(self, timestamp: int, ctx, out):
        order = self.order.value()
        if order is not None and not order.stuck_reported and self._deadline(order) == timestamp:
            self._report_stuck(order, timestamp, ctx)

    def _report_stuck(self, order: Order, deadline: int, ctx) -> Order:
        ctx.output("stuck", StuckOrder(order.order_id, order.status, order.updated_ms, deadline))
        order = replace(order, stuck_reported=True)
        self.order.update(order)
        return order


# --- input -------------------------------------------------------------------------------
def generate(
    n: int = DEFAULT_RECORDS,
    *,
    keys: int | None = None,
    zipf_s: float = 1.1,
    hot_keys: Sequence[str] = HOT_KEYS,
    hot_share: float = 0.2,
    seed: int = 0,
    start_ms: int = DEFAULT_START_MS,
    duration_ms: int = 2 * DAY,
    noise_share: float = 0.05,
    max_out_of_orderness_ms: int = MAX_OUT_OF_ORDERNESS_MS,
) -> list[OrderEvent]:
    """About ``n`` order events over ``duration_ms``: lifecycles, retries and a buggy client.

    Orders (``keys`` of them, default about ``n / 3.6``) are created uniformly
    over the window and walk their lifecycle; some are paid late (stuck in
    PENDING_PAYMENT), some cancelled, a few never delivered or accepted. A
    share ``noise_share`` of records are stray retries of a random status,
    assigned to orders by Zipf(``zipf_s``), most of them illegal. A share
    ``hot_share`` are one order replayed over and over by a buggy client
    (``HOT_KEYS``): after its first PENDING_PAYMENT every replay is illegal.
    """
    rng = np.random.default_rng(seed)
    if n <= 0:
        return []
    n_hot = int(round(n * hot_share)) if hot_keys else 0
    n_noise = int(round(n * noise_share))
    n_life = max(0, n - n_hot - n_noise)
    n_orders = max(1, round(n_life / 3.6)) if keys is None else int(keys)  # ~3.6 events per order
    oid = np.array([f"order-{seed}-{i:07d}" for i in range(n_orders)], dtype=object)
    created = rng.integers(start_ms, start_ms + max(1, duration_ms), n_orders)
    # lifecycle: delay to pay / deliver / accept, or cancel at some stage
    j = max_out_of_orderness_ms + 1_000  # one order's events stay apart (no reordering)
    pay = np.where(rng.random(n_orders) < 0.1, rng.integers(31 * MINUTE, 3 * HOUR, n_orders),
                   rng.integers(j, 20 * MINUTE, n_orders))
    deliver = rng.integers(2 * HOUR, 30 * HOUR, n_orders)
    accept = rng.integers(HOUR, 4 * DAY, n_orders)
    fate = rng.choice(5, n_orders, p=[0.08, 0.05, 0.04, 0.08, 0.75])
    # fate 0: cancelled while pending; 1: cancelled after paid; 2: cancelled after delivery;
    # 3: abandoned somewhere (no final event); 4: accepted
    ids, tss, sts = [oid], [created], [np.full(n_orders, PENDING_PAYMENT, dtype=object)]
    t_pay = created + pay
    t_del = t_pay + deliver
    t_acc = t_del + accept
    stop = np.where(fate == 3, rng.integers(1, 4, n_orders), 4)  # abandoned after 1..3 steps
    for t, status, alive in (
        (t_pay, PAID, (fate != 0) & (stop > 1)),
        (t_del, DELIVERED, (fate != 0) & (fate != 1) & (stop > 2)),
        (t_acc, ACCEPTED, (fate == 4)),
    ):
        ids.append(oid[alive])
        tss.append(t[alive])
        sts.append(np.full(int(alive.sum()), status, dtype=object))
    for fate_id, t in ((0, t_pay), (1, t_del), (2, t_acc)):
        sel = fate == fate_id
        ids.append(oid[sel])
        tss.append(t[sel])
        sts.append(np.full(int(sel.sum()), CANCELLED, dtype=object))
    if n_noise:
        noisy = sample_keys(rng, n_noise, list(oid), zipf_s=zipf_s, hot_keys=(), hot_share=0.0)
        ids.append(noisy)
        tss.append(rng.integers(start_ms, start_ms + max(1, duration_ms), n_noise))
        sts.append(rng.choice(np.array(STATUSES, dtype=object), n_noise))
    if n_hot:
        hot = np.empty(n_hot, dtype=object)
        hot[:] = [hot_keys[i] for i in rng.integers(0, len(hot_keys), n_hot)]
        ids.append(hot)
        tss.append(rng.integers(start_ms, start_ms + max(1, duration_ms), n_hot))
        sts.append(np.full(n_hot, PENDING_PAYMENT, dtype=object))
    all_ids = np.concatenate(ids)
    all_ts = np.concatenate(tss)
    all_st = np.concatenate(sts)
    # lifecycle steps are more than the out-of-orderness apart, so they arrive in order
    arrive, ts_a = arrival_order(rng, all_ts, all_ids, max_out_of_orderness_ms)
    amounts = np.round(rng.lognormal(3.5, 0.9, len(all_ids)), 2)
    i_, s_, a_ = all_ids[arrive].tolist(), all_st[arrive].tolist(), amounts.tolist()
    return [OrderEvent(i_[k], t, s_[k], a_[k] if s_[k] == PENDING_PAYMENT else 0.0) for k, t in enumerate(ts_a.tolist())]


# --- job ---------------------------------------------------------------------------------
def build(
    env: StreamEnvironment,
    records: Sequence[OrderEvent],
    *,
    stuck_after_ms: dict[str, int] | None = None,
    max_out_of_orderness_ms: int = MAX_OUT_OF_ORDERNESS_MS,
    num_splits: int = 1,
) -> None:
    """Wire the job onto ``env``; results in ``orders`` and side outputs ``illegal`` and ``stuck``."""
    wm = WatermarkStrategy.for_bounded_out_of_orderness(max_out_of_orderness_ms).with_timestamp_assigner(timestamp_of)
    (
        env.from_source(as_source(records, num_splits), wm, name="order-events", uid="order-events")
        .key_by("order_id")
        .process(OrderStateMachine(stuck_after_ms), name="order-state-machine", uid="order-state-machine")
        .collect("orders")
    )


def key_of(event: OrderEvent) -> str:
    return event.order_id
