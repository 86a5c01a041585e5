"""Key groups, computed exactly as Apache Flink computes them.

Flink never hashes a key straight onto a subtask. It hashes the key into one of
``max_parallelism`` *key groups*, and gives each subtask a contiguous range of
key groups. Rescaling moves whole key groups, never single keys.

The rules (Flink's ``KeyGroupRangeAssignment``), all pure functions here:

* ``key_group = murmur_hash(java_hash_code(key)) % max_parallelism``
* ``subtask   = key_group * parallelism // max_parallelism``
* subtask ``i`` owns key groups ``ceil(i * M / p)`` .. ``((i + 1) * M - 1) // p``
* default ``max_parallelism = min(max(next_pow2(p + p // 2), 128), 32768)``
* ``0 < parallelism <= max_parallelism <= 32768``

``java_hash_code`` reproduces ``Object.hashCode()`` of the Java value a Python
key stands for. Python's own ``hash()`` is never used: it changes per process.

=============  ======================  =========================================
Python key     Java type it stands for  hashCode
=============  ======================  =========================================
``str``        ``java.lang.String``     ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16
                                        code units, in 32-bit two's complement
``int``        ``java.lang.Long``       ``(int)(v ^ (v >>> 32))``; must fit in 64 bits
``bool``       ``java.lang.Boolean``    1231 for true, 1237 for false
``float``      ``java.lang.Double``     ``doubleToLongBits`` folded like a Long
                                        (NaN canonical; ``-0.0`` differs from ``0.0``)
``tuple``      Flink ``TupleN``         ``h = 31*h + hash(f_i)`` starting from the
                                        first field's hash (``null`` fields hash 0)
``JavaInt(v)`` ``java.lang.Integer``    ``v`` itself, for keys declared as Integer
=============  ======================  =========================================

These were checked against Flink's own ``KeyGroupRangeAssignment`` over
hundreds of keys of every type (``tests/data/flink_keygroup_vectors.json``,
made by ``tests/tooling/flink_keygroups``).

One home for this arithmetic, in three forms that agree element for element:

* :mod:`._scalar`: one key at a time, pure Python (``java_hash_code``, ``murmur_hash``,
  ``assign_to_key_group``, the subtask ranges);
* :mod:`._vectorised`: columns of keys in NumPy, Arrow strings from their buffers
  (``assign_key_groups``, ``key_groups_of``, ``java_string_hashes``), and Spark's
  partitioning behind the same call (``key_groups_for(..., scheme="spark")``);
* :mod:`.spark`: Spark's own rule beside Flink's, ``pmod(hash(cols...), partitions)`` with
  Spark SQL's Murmur3 (seed 42) column by column (``partition_ids``, ``spark_hash``), in NumPy;
* :mod:`.kernels`: ``String.hashCode`` in numba, for kernels that hash while they decode
  (the Flink reader's string decoder) and for columns of a million strings or more.
  Imported only then: ``import explorer`` does not load numba.
"""
from ._scalar import (
    DEFAULT_LOWER_BOUND_MAX_PARALLELISM,
    UPPER_BOUND_MAX_PARALLELISM,
    JavaInt,
    KeyGroupRange,
    assign_to_key_group,
    check_parallelism,
    compute_default_max_parallelism,
    compute_key_group_for_key_hash,
    java_hash_code,
    key_group_range_for_operator,
    murmur_hash,
    operator_index_for_key_group,
)
from ._vectorised import (
    KERNEL_STRINGS,
    SCHEMES,
    assign_key_groups,
    java_string_hash_codes,
    java_string_hashes,
    key_groups_for,
    key_groups_for_hash_codes,
    key_groups_of,
    operator_indices_for_key_groups,
    spark_partitions_of,
    string_buffers,
)

__all__ = [
    "DEFAULT_LOWER_BOUND_MAX_PARALLELISM",
    "JavaInt",
    "UPPER_BOUND_MAX_PARALLELISM",
    "KeyGroupRange",
    "assign_key_groups",
    "assign_to_key_group",
    "check_parallelism",
    "compute_default_max_parallelism",
    "java_hash_code",
    "java_string_hash_codes",
    "java_string_hashes",
    "key_group_range_for_operator",
    "key_groups_for",
    "key_groups_for_hash_codes",
    "key_groups_of",
    "murmur_hash",
    "operator_index_for_key_group",
    "operator_indices_for_key_groups",
    "spark_partitions_of",
]
