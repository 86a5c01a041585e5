"""Example pipelines: the jobs of the seed documents, with input generators.

Each module holds the records (dataclasses), the process functions written
as a Flink user would write them, ``generate(n, *, keys, zipf_s, hot_keys,
hot_share, seed, start_ms, ...)`` (deterministic for a seed, skew from
:mod:`explorer.pipelines._common`) and ``build(env, records, **options)``,
which wires source -> ... -> ``collect(<name>)`` onto a
:class:`~explorer.engine.StreamEnvironment`. Operators have stable names
and uids: they are state identities in snapshots. ``sessions_batch`` is no
pipeline of its own: it is ``sessions``' job run a batch at a time (the
fast path the registry runs), to be read after ``sessions``.

=============  ============================================================================
pipeline       what it exercises
=============  ============================================================================
url_counts     built-in rolling ``count()``; ValueState[int] + MapState[str, int]
sessions       ListState[Event], ValueState[int], event-time timers deleted and re-registered
fraud          ValueState[bool] flag, MapState[str, int], event-time timer, broadcast rules
               (KeyedBroadcastProcessFunction over ``MapStateDescriptor("rules", str, Rule)``)
dedup          ValueState[bool] with 24 h TTL (OnCreateAndWrite, NeverReturnExpired,
               incremental cleanup); unbounded id space
orders         ValueState[Order] state machine, side outputs ``illegal`` and ``stuck``,
               event-time timers for stuck orders
consumer_lag   stateless map/filter (source offsets are its only state)
=============  ============================================================================

::

    from explorer.pipelines import PIPELINES
    result = PIPELINES["sessions"].run(10_000, parallelism=3)
    result.output("sessions")
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..engine import StreamEnvironment
from . import consumer_lag, dedup, fraud, orders, sessions, sessions_batch, url_counts
from ._common import ReplayClock

__all__ = ["PIPELINES", "Pipeline", "ReplayClock", "get"]


@dataclass(frozen=True)
class Pipeline:
    """One example pipeline: how to make its input and how to wire its job."""

    name: str
    description: str
    generate: Callable[..., list[Any]]
    build: Callable[..., None]
    default_records: int
    #: operator uid -> names of the keyed states it declares (empty for stateless jobs)
    keyed_state: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    #: collecting sinks (``result.output(name)``) and side-output tags (``result.side_output(tag)``)
    outputs: tuple[str, ...] = ()
    side_outputs: tuple[str, ...] = ()
    #: the keys ``generate`` plants as hot by default, and the key of an input record
    hot_keys: tuple[Any, ...] = ()
    key_of: Callable[[Any], Any] | None = None
    event_time: bool = False
    #: TTL should follow event time when replaying generated history (see ReplayClock)
    replay_clock: bool = False

    @property
    def state_operators(self) -> tuple[str, ...]:
        """Uids of the operators that hold keyed state."""
        return tuple(self.keyed_state)

    def make_env(self, parallelism: int = 1, **env_options: Any):
        if self.replay_clock and "clock" not in env_options:
            env_options["clock"] = ReplayClock()
        return StreamEnvironment(parallelism=parallelism, **env_options)

    def run(
        self,
        n: int | None = None,
        *,
        parallelism: int = 1,
        seed: int = 0,
        records: list[Any] | None = None,
        generate_options: Mapping[str, Any] | None = None,
        env_options: Mapping[str, Any] | None = None,
        **build_options: Any,
    ):
        """Generate input (unless ``records`` is given), build and execute; returns the JobResult."""
        if records is None:
            records = self.generate(self.default_records if n is None else n, seed=seed, **dict(generate_options or {}))
        env = self.make_env(parallelism, **dict(env_options or {}))
        self.build(env, records, **build_options)
        return env.execute(self.name)


def _pipeline(module, name: str, description: str, keyed_state: dict[str, tuple[str, ...]], outputs, side_outputs=(),
              event_time: bool = True, replay_clock: bool = False, build: Callable[..., None] | None = None) -> Pipeline:
    return Pipeline(
        name=name,
        description=description,
        generate=module.generate,
        build=module.build if build is None else build,
        default_records=module.DEFAULT_RECORDS,
        keyed_state=keyed_state,
        outputs=tuple(outputs),
        side_outputs=tuple(side_outputs),
        hot_keys=tuple(module.HOT_KEYS),
        key_of=module.key_of,
        event_time=event_time,
        replay_clock=replay_clock,
    )


PIPELINES: dict[str, Pipeline] = {
    p.name: p
    for p in (
        _pipeline(
            url_counts,
            "url_counts",
            "Accesses per URL from nginx access-log lines: built-in rolling count and a "
            "KeyedProcessFunction with ValueState[int] and MapState[str, int] of status codes.",
            {"url-count": ("count",), "url-stats": ("count", "status_codes")},
            ("url_counts", "url_stats"),
            event_time=False,
        ),
        _pipeline(
            sessions,
            "sessions",
            "Session summaries per user, closed by a 30-minute inactivity event-time timer; "
            "ListState[Event] of the open session and ValueState[int] of its end.",
            {"sessions": ("session", "sessionEnd")},
            ("sessions",),
            build=sessions_batch.build,  # (the same job as sessions.build, a batch at a time: for speed)
        ),
        _pipeline(
            fraud,
            "fraud",
            "Fraud detector: a transaction below 1.00 then one above 500.00 within a minute at a new "
            "merchant; ValueState[bool] flag cleared by an event-time timer, MapState[str, int] of "
            "merchants, thresholds from broadcast rules.",
            {"fraud-detector": ("flag", "timer", "merchants")},
            ("alerts",),
        ),
        _pipeline(
            dedup,
            "dedup",
            "Deduplication by event id with ValueState[bool] under a 24-hour TTL "
            "(OnCreateAndWrite, NeverReturnExpired); emits first occurrences.",
            {"dedup": ("seen",)},
            ("unique",),
            replay_clock=True,
        ),
        _pipeline(
            orders,
            "orders",
            "Order state machine (PENDING_PAYMENT -> PAID -> DELIVERED -> ACCEPTED, CANCELLED) in "
            "ValueState[Order]; illegal transitions and stuck orders to side outputs.",
            {"order-state-machine": ("order",)},
            ("orders",),
            ("illegal", "stuck"),
        ),
        _pipeline(
            consumer_lag,
            "consumer_lag",
            "Consumer lag from producer and consumer offsets: stateless map and filter.",
            {},
            ("lag", "lagging"),
            event_time=False,
        ),
    )
}


def get(name: str) -> Pipeline:
    """The pipeline called ``name``; a KeyError names the ones there are."""
    try:
        return PIPELINES[name]
    except KeyError:
        raise KeyError(f"no pipeline named {name!r}; pipelines are {sorted(PIPELINES)}") from None
