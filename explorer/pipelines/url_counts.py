"""Count accesses per URL from nginx access-log lines (the stateful half of seed 004).

Two ways to keep the count, side by side in one job:

* ``key_by("url").count()``: the engine's built-in rolling count (one
  ``ValueState[int]`` named ``count`` under operator ``url-count``), emitting
  ``(url, hits)`` for every line;
* :class:`UrlStats`: the same written as a Flink user would, a
  ``ValueState[int]`` ``count`` plus a ``MapState[str, int]``
  ``status_codes`` (hits per HTTP status), emitting :class:`UrlHits`.

::

    source "access-log" -> map "parse" -> filter "valid" -+-> key_by(url).count "url-count" -> collect "url_counts"
                                                          +-> key_by(url).process "url-stats" -> collect "url_stats"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..engine import (
    KeyedProcessFunction,
    MapStateDescriptor,
    StreamEnvironment,
    ValueStateDescriptor,
)
from ._common import DEFAULT_START_MS, HOUR, as_source, sample_keys, zipf_weights

__all__ = ["AccessLog", "UrlHits", "UrlStats", "build", "generate", "parse_line", "url_names"]

HOT_KEYS = ("/api/search",)
DEFAULT_RECORDS = 50_000

_RESOURCES = ("products", "users", "orders", "cart", "reviews", "images", "categories", "blog", "static", "docs")


@dataclass(frozen=True, slots=True)
class AccessLog:
    """One parsed access-log line."""

    remote_addr: str
    ts_ms: int
    method: str
    url: str
    query: str
    status: int
    bytes_sent: int
    referer: str
    user_agent: str


@dataclass(frozen=True, slots=True)
class UrlHits:
    """What :class:`UrlStats` emits per line: the URL's running totals."""

    url: str
    hits: int
    status: str
    status_hits: int


# nginx "combined": $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"
_LINE = re.compile(
    r'^(?P<addr>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<method>[A-Z]+) (?P<target>\S+) [^"]*" '
    r'(?P<status>\d{3}) (?P<bytes>\d+|-) "(?P<referer>[^"]*)" "(?P<agent>[^"]*)"$'
)
_TIME_FORMAT = "%d/%b/%Y:%H:%M:%S %z"


def parse_line(line: str) -> AccessLog | None:
    """Parse one nginx ``combined`` line; None if it is not one."""
    m = _LINE.match(line)
    if m is None:
        return None
    target = m["target"]
    url, _, query = target.partition("?")
    ts_ms = _parse_time(m["time"])
    if ts_ms is None:
        return None
    b = m["bytes"]
    return AccessLog(
        remote_addr=m["addr"],
        ts_ms=ts_ms,
        method=m["method"],
        url=url,
        query=query,
        status=int(m["status"]),
        bytes_sent=0 if b == "-" else int(b),
        referer=m["referer"],
        user_agent=m["agent"],
    )


_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}


def _month_days(year: int, month: int) -> int:
    if month == 2:
        return 29 if (year % 4 == 0 and year % 100 != 0) or year % 400 == 0 else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _parse_time(text: str) -> int | None:
    """``10/Oct/2000:13:55:36 -0700`` to epoch ms (the fixed nginx layout; strptime is 15x slower)."""
    try:
        if len(text) != 26 or text[2] != "/" or text[6] != "/" or text[11] != ":" or text[20] != " ":
            return None
        day, mon, year = int(text[0:2]), _MONTHS[text[3:6]], int(text[7:11])
        hh, mm, ss = int(text[12:14]), int(text[15:17]), int(text[18:20])
        sign = -1 if text[21] == "-" else 1
        if text[21] not in "+-" or not (1 <= day <= _month_days(year, mon) and hh < 24 and mm < 60 and ss < 61):
            return None
        offset = sign * (int(text[22:24]) * 3600 + int(text[24:26]) * 60)
    except (KeyError, ValueError):
        return None
    seconds = _days_from_civil(year, mon, day) * 86400 + hh * 3600 + mm * 60 + ss - offset
    return seconds * 1000


def is_valid(log: AccessLog | None) -> bool:
    return log is not None


class UrlStats(KeyedProcessFunction):
    """Hits per URL and per (URL, status), in keyed state."""

    COUNT = ValueStateDescriptor("count", int)
    STATUS_CODES = MapStateDescriptor("status_codes", str, int)

    def open(self, ctx):
        self.count = ctx.get_state(self.COUNT)
        self.status_codes = ctx.get_map_state(self.STATUS_CODES)

    def process_element(self, log: AccessLog, ctx, out):
        hits = self.count.value(0) + 1
        self.count.update(hits)
        code = str(log.status)
        n = self.status_codes.get(code, 0) + 1
        self.status_codes[code] = n
        out.collect(UrlHits(log.url, hits, code, n))


# --- input -------------------------------------------------------------------------------
def url_names(keys: int | Sequence[str]) -> list[str]:
    """Background URLs: ``/api/<resource>/<rank>`` for an int, else the given paths."""
    if isinstance(keys, (int, np.integer)):
        if keys <= 0:
            raise ValueError(f"keys must be positive, found {keys}")
        return [f"/api/{_RESOURCES[i % len(_RESOURCES)]}/{i}" for i in range(int(keys))]
    return list(keys)


_AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36",
    "curl/8.5.0",
    "python-requests/2.32.3",
    "Googlebot/2.1 (+http://www.google.com/bot.html)",
)
_METHODS = np.array(["GET", "POST", "PUT", "DELETE"], dtype=object)
_METHOD_P = [0.8, 0.14, 0.04, 0.02]
_STATUSES = np.array([200, 304, 301, 404, 500, 503], dtype=np.int64)
_STATUS_P = [0.84, 0.06, 0.02, 0.05, 0.02, 0.01]
_REFERERS = np.array(["-", "https://shop.example.com/", "https://www.google.com/", "https://shop.example.com/cart"], dtype=object)


def generate(
    n: int = DEFAULT_RECORDS,
    *,
    keys: int | Sequence[str] = 1000,
    zipf_s: float = 1.1,
    hot_keys: Sequence[str] = HOT_KEYS,
    hot_share: float = 0.2,
    seed: int = 0,
    start_ms: int = DEFAULT_START_MS,
    duration_ms: int = HOUR,
    malformed_share: float = 0.001,
) -> list[str]:
    """``n`` nginx ``combined`` access-log lines over ``duration_ms``, in time order.

    URLs follow the skew model of :mod:`explorer.pipelines._common`; some
    requests carry a query string (stripped by :func:`parse_line`), and a
    share ``malformed_share`` of lines is garbage the job filters out.
    """
    rng = np.random.default_rng(seed)
    urls = sample_keys(rng, n, url_names(keys), zipf_s=zipf_s, hot_keys=hot_keys, hot_share=hot_share)
    ts = np.sort(rng.integers(start_ms, start_ms + max(1, duration_ms), n))
    seconds, which = np.unique(ts // 1000, return_inverse=True)  # nginx logs whole seconds: format each once
    times = pd.to_datetime(seconds, unit="s", utc=True).strftime(_TIME_FORMAT)
    times = times.to_numpy(dtype=object)[which]
    # clients repeat: a pool of addresses, busier ones more often
    pool = np.array([f"{a}.{b}.{c}.{d}" for a, b, c, d in rng.integers(1, 255, (max(16, n // 20), 4)).tolist()],
                    dtype=object)
    addrs = pool[rng.choice(len(pool), n, p=zipf_weights(len(pool), 0.8))]
    methods = rng.choice(_METHODS, n, p=_METHOD_P)
    statuses = rng.choice(_STATUSES, n, p=_STATUS_P)
    sizes = rng.lognormal(7.5, 1.2, n).astype(np.int64).astype(str).astype(object)
    sizes[np.isin(statuses, (301, 304))] = "-"
    refs = rng.choice(_REFERERS, n)
    agents = np.array(_AGENTS, dtype=object)[rng.integers(0, len(_AGENTS), n)]
    with_query = rng.random(n) < 0.15
    targets = urls.copy()
    targets[with_query] = targets[with_query] + "?q=" + rng.integers(0, 10_000, int(with_query.sum())).astype(str)
    lines = [
        f'{a} - - [{t}] "{m} {u} HTTP/1.1" {s} {z} "{r}" "{g}"'
        for a, t, m, u, s, z, r, g in zip(addrs, times, methods, targets, statuses.tolist(), sizes, refs, agents)
    ]
    if malformed_share > 0:
        for i in np.flatnonzero(rng.random(n) < malformed_share).tolist():
            lines[i] = f"{addrs[i]} - - [{times[i]}] \\x16\\x03\\x01 400 0 \"-\" \"-\""
    return lines


# --- job ---------------------------------------------------------------------------------
def build(env: StreamEnvironment, records: Sequence[str], *, variant: str = "both", num_splits: int = 1) -> None:
    """Wire the job onto ``env``. ``variant``: ``"count"``, ``"process"`` or ``"both"``."""
    if variant not in ("count", "process", "both"):
        raise ValueError(f"variant must be 'count', 'process' or 'both', found {variant!r}")
    # parse at the source's parallelism: a rebalance before key_by would let one URL's
    # lines overtake each other (as in Flink), and UrlHits would depend on parallelism
    logs = (
        env.from_source(as_source(records, num_splits), name="access-log", uid="access-log")
        .map(parse_line, name="parse", uid="parse", parallelism=1)
        .filter(is_valid, name="valid", uid="valid", parallelism=1)
    )
    if variant in ("count", "both"):
        logs.key_by("url").count(name="url-count", uid="url-count").collect("url_counts")
    if variant in ("process", "both"):
        logs.key_by("url").process(UrlStats(), name="url-stats", uid="url-stats").collect("url_stats")


def key_of(line: Any) -> str | None:
    """The key a raw input line is counted under (its path), for hot-key checks."""
    log = parse_line(line) if isinstance(line, str) else line
    return None if log is None else log.url
