"""Questions answered about a snapshot, as pandas DataFrames.

Every function takes a :class:`~explorer.snapshot.Snapshot` or a keyed-state
DataFrame with the contract columns, and returns a DataFrame.

With a Snapshot, the first analysis reads the columns analyses need once
(operator, state, kind, key, key group, subtask, size, last access, expiry;
never the values), with keys as Arrow dictionary codes, and keeps them on the
Snapshot (:mod:`._columns`; ``snap.drop_analysis_cache()`` frees them). Loads
per subtask are ``np.bincount`` over key groups, per-key sums ``np.bincount``
over key codes; only the keys an answer reports become Python objects.

``LOAD_COLUMNS`` are the contract columns most analyses read (never ``value``).

The modules, one purpose each:

* :mod:`.distribution`: key groups per subtask, imbalance, rescale what-if;
* :mod:`.hotkeys`: top keys by bytes, entries or traffic, skew, salting what-if;
* :mod:`.ttl`: expiry timeline, expired-but-not-cleaned, unbounded growth;
* :mod:`.history`: size, delta, duration, alignment and keys over checkpoints;
* :mod:`.diff`: keys added, removed, changed, and growth between two snapshots;
* :mod:`.changes`: the change feed between two batches (Spark), per key.
"""

from ._common import LOAD_COLUMNS, keyed_operators
from ._keys import with_key_codes
from .changes import changes
from .diff import diff, diff_summary, growth_by_key
from .distribution import (
    OVERLOAD_CAPTION,
    best_parallelisms,
    fixed_partitioning,
    imbalance,
    key_group_aggregates,
    key_group_distribution,
    overload,
    rescale_whatif,
    state_sizes,
    subtask_distribution,
    subtask_loads,
)
from .history import checkpoint_summary, history
from .hotkeys import (gini, hot_keys, hottest_key, key_order, key_skew, key_stats, lorenz_curve, rank_order, salted_key,
                      salting_measure, salting_whatif, top_share)
from .ttl import expired_not_cleaned, missing_ttls, ttl_expiry, ttl_hint, ttl_summary, unbounded_growth


def warm_kernels() -> None:
    """Compile (or load from numba's cache) the analyses' kernels for every signature the analyses pass
    them: the key numbering and per-key sums of a large range, the diff, the hot keys' per-subtask loads
    (``python -m explorer.kernels --warm``, at install). Not an analysis: left out of ``__all__``."""
    from . import _diff_kernels, _hot_kernels, _key_kernels  # numba: not loaded by import explorer.analysis

    _key_kernels.warm()
    _diff_kernels.warm()
    _hot_kernels.warm()

__all__ = [
    "LOAD_COLUMNS",
    "OVERLOAD_CAPTION",
    "best_parallelisms",
    "changes",
    "checkpoint_summary",
    "diff",
    "diff_summary",
    "expired_not_cleaned",
    "fixed_partitioning",
    "gini",
    "growth_by_key",
    "history",
    "hot_keys",
    "hottest_key",
    "imbalance",
    "key_group_aggregates",
    "key_group_distribution",
    "key_order",
    "key_skew",
    "key_stats",
    "keyed_operators",
    "lorenz_curve",
    "missing_ttls",
    "overload",
    "rank_order",
    "rescale_whatif",
    "salted_key",
    "salting_measure",
    "salting_whatif",
    "state_sizes",
    "subtask_distribution",
    "subtask_loads",
    "top_share",
    "ttl_expiry",
    "ttl_hint",
    "ttl_summary",
    "unbounded_growth",
    "with_key_codes",
]
