"""Spark's partition of a key, recomputed in NumPy, against Spark itself."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from explorer.errors import KeyTypeError
from explorer.keygroups.spark import partition_ids, spark_hash, spark_hash_value, spark_partition

pytestmark = pytest.mark.spark

STRINGS = ["", "a", "ab", "abc", "abcd", "abcde", "héllo wörld", "日本語テキスト", "user-123456789", None,
           "x" * 37, "\u00ff\u00fe", "emoji 🎉"]
INTS = [0, 1, -1, 7, 2**31 - 1, -(2**31), 123456, None]
LONGS = [0, 1, -1, 2**40 + 3, 2**63 - 1, -(2**63), None]
DOUBLES = [0.0, -0.0, 1.5, -2.25, 1e300, float("nan"), None]


def _spark_hashes(spark, rows, ddl, exprs):
    df = spark.createDataFrame(rows, ddl)
    return [tuple(r) for r in df.selectExpr(*exprs).collect()]


def test_string_hash_equals_spark(spark):
    got = [r[0] for r in _spark_hashes(spark, [(s,) for s in STRINGS], "s string", ["hash(s)"])]
    assert spark_hash([STRINGS]).tolist() == got


def test_int_long_double_boolean_hash_equal_spark(spark):
    got = _spark_hashes(spark, [(i,) for i in INTS], "i int", ["hash(i)", "hash(cast(i as long))", "hash(i > 0)",
                                                                "hash(try_cast(i as short))", "hash(date_from_unix_date(i))"])
    assert spark_hash([INTS], ["int"]).tolist() == [g[0] for g in got]
    assert spark_hash([INTS]).tolist() == [g[1] for g in got]  # Python ints are Spark longs
    assert spark_hash([[None if i is None else i > 0 for i in INTS]]).tolist() == [g[2] for g in got]
    shorts = [i if i is not None and -(2**15) <= i < 2**15 else None for i in INTS]
    assert spark_hash([shorts], ["short"]).tolist() == [g[3] for g in got]
    assert spark_hash([pa.array(INTS, pa.int32()).cast(pa.date32())]).tolist() == [g[4] for g in got]

    got = _spark_hashes(spark, [(v,) for v in LONGS], "l long", ["hash(l)"])
    assert spark_hash([LONGS]).tolist() == [g[0] for g in got]

    got = _spark_hashes(spark, [(v,) for v in DOUBLES], "d double", ["hash(d)", "hash(cast(d as float))"])
    assert spark_hash([DOUBLES]).tolist() == [g[0] for g in got]
    assert spark_hash([DOUBLES], ["float"]).tolist() == [g[1] for g in got]


def test_multi_column_hash_chains_seeds(spark):
    rows = [(s, i) for s in ["a", None, "user-7"] for i in [None, 3, -9]]
    got = [r[0] for r in _spark_hashes(spark, rows, "s string, i int", ["hash(s, i)"])]
    cols = [[r[0] for r in rows], [r[1] for r in rows]]
    assert spark_hash(cols, ["string", "int"]).tolist() == got
    # chaining: the first column's hash is the second column's seed
    h1 = spark_hash([cols[0]])
    assert spark_hash([cols[1]], ["int"], seed=0).tolist() != got  # not a seed-independent combination
    for k, (s, i) in enumerate(rows):
        expected = spark_hash_value(s, i, types=["string", "int"])
        assert expected == got[k]
        if i is None:
            assert expected == int(h1[k])  # a null column leaves the hash unchanged


def test_partition_ids_equal_spark_shuffle(spark):
    keys = [f"user-{i}" for i in range(200)] + [None]
    df = spark.createDataFrame([(k,) for k in keys], "k string").repartition(7, "k")
    got = {r[0]: r[1] for r in df.selectExpr("k", "spark_partition_id()").collect()}
    mine = partition_ids([keys], 7)
    assert {k: int(p) for k, p in zip(keys, mine)} == got


def test_vectorised_inputs_agree():
    keys = ["a", "bb", "ccc", None]
    base = spark_hash([keys]).tolist()
    assert spark_hash([pd.Series(keys)]).tolist() == base
    assert spark_hash([pa.chunked_array([keys[:2], keys[2:]])]).tolist() == base
    assert spark_hash([pa.array(keys).dictionary_encode()]).tolist() == base
    assert spark_hash([np.array([1, 2, 3], dtype=np.int32)]).tolist() == spark_hash([[1, 2, 3]], ["int"]).tolist()


def test_pmod_is_non_negative():
    h = np.array([-1, -7, 0, 5, -(2**31)], dtype=np.int32)
    assert spark_partition(h, 4).tolist() == [3, 1, 0, 1, 0]


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(KeyTypeError, match="unknown Spark type"):
        spark_hash([[1]], ["decimal"])
    with pytest.raises(KeyTypeError, match="differ in length"):
        spark_hash([[1], [1, 2]])
    with pytest.raises(KeyTypeError, match="positive"):
        partition_ids([[1]], 0)
    with pytest.raises(KeyTypeError, match="cannot recompute"):
        spark_hash([pa.array([[1]])])
