"""orders: transitions, illegal events and stuck orders equal a plain simulation of the state machine."""

from __future__ import annotations

from collections import Counter

import pytest

from explorer.engine import StreamEnvironment
from explorer.pipelines import orders
from explorer.pipelines.orders import IllegalTransition, OrderEvent, StuckOrder

MIN = 60_000
T0 = 1_767_258_000_000
NEXT = {
    None: {"PENDING_PAYMENT"},
    "PENDING_PAYMENT": {"PAID", "CANCELLED"},
    "PAID": {"DELIVERED", "CANCELLED"},
    "DELIVERED": {"ACCEPTED", "CANCELLED"},
}
STUCK_AFTER = {"PENDING_PAYMENT": 30 * MIN, "PAID": 24 * 60 * MIN, "DELIVERED": 3 * 24 * 60 * MIN}


def simulate(events, stuck_after=STUCK_AFTER):
    """Walk the events in input order with a dict per open order (written from the seed's description)."""
    open_orders: dict[str, dict] = {}
    updates, illegal, stuck = [], [], []
    for e in events:
        o = open_orders.get(e.order_id)
        if o is not None and not o["stuck"] and o["status"] in stuck_after:
            deadline = o["updated"] + stuck_after[o["status"]]
            if e.ts >= deadline:
                stuck.append(StuckOrder(e.order_id, o["status"], o["updated"], deadline))
                o["stuck"] = True
        current = None if o is None else o["status"]
        if e.status not in NEXT.get(current, set()):
            illegal.append(IllegalTransition(e.order_id, e.ts, current, e.status))
            continue
        if o is None:
            o = {"status": e.status, "amount": e.amount, "created": e.ts}
        o.update(status=e.status, updated=e.ts, stuck=False)
        updates.append((e.order_id, e.status, o["amount"], o["created"], e.ts))
        if e.status in ("ACCEPTED", "CANCELLED"):
            open_orders.pop(e.order_id, None)
        else:
            open_orders[e.order_id] = o
    for oid, o in open_orders.items():  # end of input: every pending timer fires
        if not o["stuck"] and o["status"] in stuck_after:
            stuck.append(StuckOrder(oid, o["status"], o["updated"], o["updated"] + stuck_after[o["status"]]))
    return Counter(updates), Counter(illegal), Counter(stuck)


def run(events, parallelism=1, **kw):
    env = StreamEnvironment(parallelism=parallelism, **kw)
    orders.build(env, events)
    return env.execute("orders")


def observed(result):
    ups = Counter((o.order_id, o.status, o.amount, o.created_ms, o.updated_ms) for o in result.output("orders"))
    return ups, Counter(result.side_output("illegal")), Counter(result.side_output("stuck"))


def oe(order_id, minutes, status, amount=0.0):
    return OrderEvent(order_id, T0 + minutes * MIN, status, amount)


def test_happy_path_and_cancellation():
    events = [
        oe("o1", 0, "PENDING_PAYMENT", 42.0),
        oe("o2", 1, "PENDING_PAYMENT", 7.0),
        oe("o1", 5, "PAID"),
        oe("o2", 6, "CANCELLED"),
        oe("o1", 60, "DELIVERED"),
        oe("o1", 120, "ACCEPTED"),
    ]
    result = run(events)
    assert [(o.order_id, o.status) for o in result.output("orders")] == [(e.order_id, e.status) for e in events]
    assert result.side_output("illegal") == [] and result.side_output("stuck") == []
    assert result.state("order-state-machine").empty  # final orders are cleared
    assert observed(result) == simulate(events)


@pytest.mark.parametrize(
    "events, illegal",
    [
        ([oe("o", 0, "PAID")], [(None, "PAID")]),  # no open order
        ([oe("o", 0, "PENDING_PAYMENT"), oe("o", 1, "DELIVERED")], [("PENDING_PAYMENT", "DELIVERED")]),
        ([oe("o", 0, "PENDING_PAYMENT"), oe("o", 1, "PENDING_PAYMENT")], [("PENDING_PAYMENT", "PENDING_PAYMENT")]),
        # the seed's example: an accepted order cannot be cancelled (its state is gone)
        (
            [oe("o", 0, "PENDING_PAYMENT"), oe("o", 1, "PAID"), oe("o", 2, "DELIVERED"), oe("o", 3, "ACCEPTED"),
             oe("o", 4, "CANCELLED")],
            [(None, "CANCELLED")],
        ),
        ([oe("o", 0, "PENDING_PAYMENT"), oe("o", 1, "CANCELLED"), oe("o", 2, "PAID")], [(None, "PAID")]),
    ],
)
def test_illegal_transitions_go_to_the_side_output(events, illegal):
    result = run(events)
    assert [(i.from_status, i.to_status) for i in result.side_output("illegal")] == illegal
    assert observed(result) == simulate(events)


def test_stuck_orders_are_reported_once_per_status():
    events = [
        oe("late-payer", 0, "PENDING_PAYMENT"),
        oe("late-payer", 45, "PAID"),  # 45 min in PENDING_PAYMENT: stuck at 30
        oe("late-payer", 50, "DELIVERED"),
        oe("late-payer", 60, "ACCEPTED"),
        oe("on-time", 0, "PENDING_PAYMENT"),
        oe("on-time", 29, "PAID"),  # 29 min: fine; then PAID forever: stuck after 24 h
        oe("exact", 0, "PENDING_PAYMENT"),
        oe("exact", 30, "CANCELLED"),  # exactly at the deadline counts as stuck
    ]
    result = run(sorted(events, key=lambda e: e.ts))
    assert Counter(result.side_output("stuck")) == Counter(
        [
            StuckOrder("late-payer", "PENDING_PAYMENT", T0, T0 + 30 * MIN),
            StuckOrder("on-time", "PAID", T0 + 29 * MIN, T0 + 29 * MIN + 24 * 60 * MIN),
            StuckOrder("exact", "PENDING_PAYMENT", T0, T0 + 30 * MIN),
        ]
    )
    assert observed(result) == simulate(sorted(events, key=lambda e: e.ts))


def test_stuck_by_timer_while_the_job_runs():
    # the watermark passes the deadline long before the end of input
    events = [oe("slow", 0, "PENDING_PAYMENT")] + [oe(f"other-{i}", 10 + i, "PENDING_PAYMENT") for i in range(60)]
    for p in (1, 3):
        result = run(events, p, batch_size=4)
        stuck = result.side_output("stuck")
        assert StuckOrder("slow", "PENDING_PAYMENT", T0, T0 + 30 * MIN) in stuck
        assert observed(result) == simulate(events)
        state = result.state("order-state-machine")
        assert state.loc[state.key == "slow", "value"].iloc[0].stuck_reported is True


@pytest.mark.parametrize("parallelism", [1, 3])
def test_generated_input_matches_a_plain_simulation(parallelism):
    events = orders.generate(6000, seed=9)
    got = observed(run(events, parallelism))
    expected = simulate(events)
    assert got == expected
    ups, illegal, stuck = expected
    assert sum(illegal.values()) > 0 and sum(stuck.values()) > 0
    assert {s.status for s in stuck} == {"PENDING_PAYMENT", "PAID", "DELIVERED"}


def test_independent_of_batching():
    events = orders.generate(3000, seed=10)
    assert observed(run(events, 1, batch_size=3)) == observed(run(events, 3, batch_size=5000))


def test_custom_stuck_thresholds():
    events = [oe("o", 0, "PENDING_PAYMENT"), oe("o", 10, "PAID")]
    env = StreamEnvironment()
    orders.build(env, events, stuck_after_ms={"PENDING_PAYMENT": 5 * MIN})
    stuck = env.execute().side_output("stuck")
    assert stuck == [StuckOrder("o", "PENDING_PAYMENT", T0, T0 + 5 * MIN)]


def test_next_status():
    assert orders.next_status(None, "PENDING_PAYMENT") == "PENDING_PAYMENT"
    assert orders.next_status("ACCEPTED", "CANCELLED") is None
    assert all(orders.next_status(s, "CANCELLED") == "CANCELLED" for s in ("PENDING_PAYMENT", "PAID", "DELIVERED"))
