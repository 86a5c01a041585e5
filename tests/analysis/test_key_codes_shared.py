"""A frame's keys hashed once (``with_key_codes``) answer as the frame itself; str look-ups keep the per-type rule."""

import numpy as np
import pandas as pd
from pandas.testing import assert_frame_equal

import explorer

from explorer.analysis import key_group_aggregates, key_stats, with_key_codes
from explorer.analysis._keys import KeyValues
from tests.support.truth import entries_per_key


def test_coded_frame_answers_as_the_frame(planted_job):
    df = explorer.open(planted_job.savepoint).keyed_state()
    coded = with_key_codes(df)
    assert coded["key"].dtype.kind == "i" and "key_values" not in df.attrs  # the user's frame is untouched
    assert with_key_codes(coded) is coded
    hh = pd.DataFrame({"operator": [df["operator"].iloc[0]] * 2, "key": [df["key"].iloc[0], "no such key"],
                       "count": [7, 3], "error": [0, 0]})
    want = key_stats(df, max_parallelism=128, heavy_hitters=hh)
    assert_frame_equal(key_stats(coded, max_parallelism=128, heavy_hitters=hh), want)
    assert int(want["records"].notna().sum()) == 1
    assert dict(zip(want["key"], want["entries"])) == entries_per_key(planted_job.records)
    assert_frame_equal(key_group_aggregates(coded, max_parallelism=128),
                       key_group_aggregates(df, max_parallelism=128))


def test_str_keys_match_only_str_values_the_first_of_equal_ones():
    values = np.empty(7, dtype=object)
    values[:] = ["a", 1, np.str_("b"), "b", ("t", 1), "c", "a"]
    kv = KeyValues.from_objects(values)
    # "b" is the plain str at 3, not the NumPy string at 2; "a" the first of two; 1 is not "1"
    assert kv.codes_of(["b", "a", "1", "zz", "c"]).tolist() == [3, 0, -1, -1, 5]
    assert kv.codes_of([1, ("t", 1)]).tolist() == [1, 4]
