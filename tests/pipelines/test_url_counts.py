"""url_counts: rolling counts per URL equal a Counter over the same log lines."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from explorer.engine import StreamEnvironment
from explorer.pipelines import url_counts


def request_path(line: str) -> tuple[str, int] | None:
    """Path and status of a combined-format line, parsed without the pipeline's code."""
    parts = line.split('"')
    if len(parts) < 3:
        return None
    request = parts[1].split(" ")
    if len(request) != 3:
        return None
    status = int(parts[2].split()[0])
    return request[1].split("?")[0], status


def run(lines, parallelism, **kw):
    env = StreamEnvironment(parallelism=parallelism, **kw)
    url_counts.build(env, lines)
    return env.execute("url_counts")


@pytest.fixture(scope="module")
def lines():
    return url_counts.generate(4000, keys=50, seed=7, malformed_share=0.01)


@pytest.mark.parametrize("parallelism", [1, 3])
def test_counts_equal_a_counter(lines, parallelism):
    parsed = [p for p in map(request_path, lines) if p is not None]
    expected = Counter(path for path, _ in parsed)
    assert len(parsed) < len(lines)  # some garbage was generated and must be skipped
    result = run(lines, parallelism)
    emitted = defaultdict(list)
    for url, n in result.output("url_counts"):
        emitted[url].append(n)
    # a rolling count emits 1, 2, ..., total for every URL, in order
    assert {u: sorted(ns) for u, ns in emitted.items()} == {u: list(range(1, c + 1)) for u, c in expected.items()}
    assert {u: ns[-1] for u, ns in emitted.items()} == dict(expected)


@pytest.mark.parametrize("parallelism", [1, 3])
def test_process_function_keeps_counts_and_status_codes(lines, parallelism):
    parsed = [p for p in map(request_path, lines) if p is not None]
    per_url = Counter(path for path, _ in parsed)
    per_status = Counter((path, str(status)) for path, status in parsed)
    result = run(lines, parallelism)
    last = {}
    for hit in result.output("url_stats"):
        last[hit.url] = max(last.get(hit.url, 0), hit.hits)
    assert last == dict(per_url)
    state = result.state("url-stats")
    counts = state[state.state == "count"]
    assert dict(zip(counts.key, counts.value)) == dict(per_url)
    codes = state[state.state == "status_codes"]
    assert Counter({(k, uk): v for k, uk, v in zip(codes.key, codes.user_key, codes.value)}) == per_status
    assert set(codes.kind) == {"map"}


def test_same_output_at_parallelism_1_and_3(lines):
    a, b = run(lines, 1), run(lines, 3)
    for name in ("url_counts", "url_stats"):
        assert Counter(a.output(name)) == Counter(b.output(name))


def test_builtin_and_process_function_agree(lines):
    result = run(lines, 2)
    assert Counter(result.output("url_counts")) == Counter((h.url, h.hits) for h in result.output("url_stats"))


def test_parse_line():
    line = ('203.0.113.7 - - [01/Jan/2026:00:00:05 +0000] "GET /api/a?x=1 HTTP/1.1" 304 - '
            '"https://example.com/" "curl/8.5.0"')
    log = url_counts.parse_line(line)
    assert log is not None
    assert (log.url, log.query, log.status, log.bytes_sent, log.method) == ("/api/a", "x=1", 304, 0, "GET")
    assert log.ts_ms == 1_767_225_605_000
    assert url_counts.parse_line("not a log line") is None
    assert url_counts.parse_line(line.replace("01/Jan/2026", "99/Foo/2026")) is None


def test_variants():
    lines = url_counts.generate(200, keys=5, seed=1)
    env = StreamEnvironment()
    url_counts.build(env, lines, variant="count")
    assert sorted(env.execute().outputs) == ["url_counts"]
    with pytest.raises(ValueError, match="variant"):
        url_counts.build(StreamEnvironment(), lines, variant="nope")


def test_generate_is_deterministic_per_seed():
    assert url_counts.generate(300, seed=3) == url_counts.generate(300, seed=3)
    assert url_counts.generate(300, seed=3) != url_counts.generate(300, seed=4)


def test_access_log_times_parse_like_strptime_and_refuse_impossible_dates():
    from datetime import datetime

    from explorer.pipelines.url_counts import _parse_time

    for text in ["10/Oct/2000:13:55:36 -0700", "29/Feb/2024:00:00:00 +0000", "31/Dec/1999:23:59:59 +0530",
                 "01/Jan/1970:00:00:00 +0000", "28/Feb/2100:12:00:00 -1200"]:
        assert _parse_time(text) == int(datetime.strptime(text, "%d/%b/%Y:%H:%M:%S %z").timestamp()) * 1000
    for bad in ["31/Feb/2024:00:00:00 +0000", "29/Feb/2023:00:00:00 +0000", "31/Apr/2024:00:00:00 +0000",
                "10/Foo/2000:13:55:36 -0700", "10/Oct/2000:25:55:36 -0700", "garbage"]:
        assert _parse_time(bad) is None
