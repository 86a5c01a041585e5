"""The top rows of a range and the order of tied keys: the Arrow sort of str keys and the copy-free cut give
what the straightforward NumPy ranking (every row, ``key_order`` over Python str) gives, ties included."""

import numpy as np
import pyarrow as pa
import pytest

from explorer.analysis._common import KeyTable
from explorer.analysis._keys import Deferred, KeyValues
from explorer.analysis.hotkeys import _key_order, _top_rows, key_order


def _keys(rng, k):
    alphabet = list("abcXYZ019-_") + ["é", "ß", "€", "𝄞", "ä"]  # non-ASCII: code point order, not Latin-1
    words = {"".join(rng.choice(alphabet, size=rng.integers(0, 6))) for _ in range(3 * k)}
    words = sorted(words)
    rng.shuffle(words)
    return words[:k]


def _table(rng, k, deferred):
    words = _keys(rng, k)
    k = len(words)
    if deferred:  # as the kernel numbers a range's keys: the distinct keys at rising rows of the key column
        source = pa.array(["pad"] + [w for w in words for _ in range(2)])
        rows = np.arange(1, 2 * k + 1, 2)
        values = KeyValues([Deferred(k, lambda: source.take(pa.array(rows)), source=source, rows=rows)])
    else:
        values = KeyValues([pa.array(words)])
    z = np.zeros(k, dtype=np.int64)
    entries = rng.integers(1, 4, k)  # few values: ties in entries too
    nbytes = rng.integers(0, 5, k) * 8
    records = rng.integers(0, 6, k)
    kt = KeyTable(op=np.zeros(k, dtype=np.int32), op_names=["op"], key=np.arange(k), key_group=z, subtask=z,
                  entries=entries, bytes=nbytes, values=values, records=records, records_error=z.copy(),
                  records_known=rng.random(k) < 0.7)
    return kt, words


def _naive_top(kt, words, metric, n):
    v = kt.column(metric).astype(np.int64)
    if metric == "records":
        v = np.where(kt.records_known, v, -1)
    rows = np.flatnonzero(v >= 0) if metric == "records" else np.arange(len(v))
    tie = np.empty(len(rows), dtype=np.int64)
    tie[key_order([words[i] for i in rows])] = np.arange(len(rows))
    return rows[np.lexsort((tie, -kt.entries[rows], -v[rows]))][:n]


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_tied_str_keys_ordered_as_python_str(seed, deferred):
    rng = np.random.default_rng(seed)
    kt, words = _table(rng, 400, deferred)
    rows = rng.permutation(len(words))[:300]
    want = np.argsort(np.array([words[i] for i in rows], dtype=object), kind="stable")
    assert np.array_equal(_key_order(kt, rows), want)


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("metric", ["entries", "bytes", "records"])
@pytest.mark.parametrize("n", [1, 3, 10, 250, 1000])
@pytest.mark.parametrize("seed", range(4))
def test_top_rows_equal_the_straightforward_ranking(seed, n, metric, deferred):
    rng = np.random.default_rng(100 + seed)
    kt, words = _table(rng, 500, deferred)
    assert np.array_equal(_top_rows(kt, metric, n), _naive_top(kt, words, metric, n))


@pytest.mark.parametrize("seed", range(3))
def test_subtask_sums_kernel_equals_the_bincounts(seed):
    from explorer.analysis import _hot_kernels

    rng = np.random.default_rng(seed)
    k, p = 300_000, 7
    subtask = rng.integers(0, p - 1, k)  # the last subtask holds nothing
    entries, nbytes, records = rng.integers(1, 30, k), rng.integers(0, 10**12, k), rng.integers(0, 900, k)
    out = np.empty((4, p))
    assert _hot_kernels.subtask_sums(subtask, entries, nbytes, records, p, out)
    for row, w in zip(out, (entries, nbytes, None, records)):
        want = np.bincount(subtask, weights=None if w is None else w.astype(np.float64), minlength=p)
        assert np.array_equal(row, want.astype(np.float64))
    subtask[5] = p
    assert not _hot_kernels.subtask_sums(subtask, entries, nbytes, records, p, out)


def test_a_range_summary_has_the_loads_of_the_bincounts():
    from explorer.analysis._common import KERNEL_ROWS
    from explorer.analysis.hotkeys import _kernel_loads

    rng = np.random.default_rng(9)
    kt, _ = _table(rng, 50, False)
    k = KERNEL_ROWS + 5
    big = KeyTable(op=np.zeros(k, dtype=np.int32), op_names=["op"], key=np.arange(k), key_group=np.zeros(k, np.int64),
                   subtask=rng.integers(0, 4, k), entries=rng.integers(1, 9, k), bytes=rng.integers(0, 999, k),
                   values=kt.values, records=rng.integers(0, 50, k), records_error=np.zeros(k, np.int64),
                   records_known=np.ones(k, bool))
    _kernel_loads(big, 4)
    assert ("loads", "bytes", 4) in big.memo
    for metric in ("entries", "bytes", "keys", "records"):
        w = None if metric == "keys" else big.column(metric).astype(np.float64)
        assert np.array_equal(big.subtask_loads(metric, 4), np.bincount(big.subtask, weights=w, minlength=4))
