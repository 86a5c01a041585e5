"""The generated inputs every benchmark shares, so every engine and every peer sees the same records.

* :func:`make_input` - ``(key, i)`` pairs, Zipf(1.2) over 100 k string keys with
  3 planted hot keys taking 5 % of the traffic (bench_engine's in-process input).
* :func:`peer_events_file` - the event stream of the peer comparison
  (bench_peers) written once to ``.cache/bench-input/`` as CSV
  ``user,ts,kind``: the session pipeline's generator (Zipf(1.1) over 100 k
  users, 3 planted bots with 15 % of the traffic, visits separated by breaks of
  more than 30 minutes, 5 s bounded out-of-order arrival). Our engine, Bytewax
  and Flink all read this file, so keyed count and sessions run on identical
  records everywhere.
"""

from __future__ import annotations

import csv
import hashlib
import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
INPUT_CACHE = ROOT / ".cache" / "bench-input"

PEER_KEYS = 100_000
PEER_HOT_KEYS = ("bot-crawler-1", "bot-crawler-2", "bot-crawler-3")
PEER_HOT_SHARE = 0.15
PEER_SEED = 11
#: what bench_peers states about its input
PEER_INPUT_DESCRIPTION = (f"session-pipeline events: Zipf(1.1) over {PEER_KEYS:,} users, {len(PEER_HOT_KEYS)} planted "
                          f"hot keys with {PEER_HOT_SHARE:.0%} of the traffic, breaks > 30 min between visits, "
                          "5 s bounded out-of-order arrival; CSV user,ts,kind")


def make_input(n: int, keys: int = 100_000, seed: int = 7) -> list[tuple[str, int]]:
    rng = np.random.default_rng(seed)
    ranks = rng.zipf(1.2, n) % keys
    hot = rng.random(n) < 0.05  # planted hot keys take 5 % of the traffic
    ranks[hot] = rng.integers(0, 3, int(hot.sum())) + keys
    names = [f"user-{r}" for r in range(keys + 3)]
    return [(names[r], i) for i, r in enumerate(ranks.tolist())]


def peer_events_file(n: int, seed: int = PEER_SEED, cache: Path = INPUT_CACHE) -> Path:
    """Generate ``n`` session events once into ``cache`` (CSV with a header) and return the path."""
    path = cache / f"events-{n}-s{seed}.csv"
    if path.is_file():
        return path
    from explorer.pipelines import sessions

    events = sessions.generate(n, keys=PEER_KEYS, hot_keys=PEER_HOT_KEYS, hot_share=PEER_HOT_SHARE, seed=seed)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("user", "ts", "kind"))
        w.writerows((e.user_id, e.ts, e.kind) for e in events)
    tmp.replace(path)
    return path


def read_events(path: Path) -> tuple[list[str], list[int], list[str]]:
    """The CSV back as three columns (users, timestamps in epoch ms, kinds)."""
    users, ts, kinds = [], [], []
    with open(path, newline="") as f:
        r = csv.reader(f)
        next(r)
        for u, t, k in r:
            users.append(u)
            ts.append(int(t))
            kinds.append(k)
    return users, ts, kinds


def sessions_digest(summaries: list[tuple]) -> str:
    """SHA-256 of the sorted (user, start, end, events, purchases) tuples of a sessions run: equal
    outputs, equal digests (bench_peers compares the engine's with a bare loop's)."""
    h = hashlib.sha256()
    for row in sorted(summaries):
        h.update(repr(row).encode())
    return h.hexdigest()
