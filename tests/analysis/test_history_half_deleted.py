"""history() over a checkpoint folder whose superseded chk-N was half deleted (issue 33).

A cancelled job (or a retention cut short) leaves an older ``chk-N`` with its ``_metadata`` but without
some of the files that metadata names. Opening that checkpoint alone is an error; ``history`` shows it
as one row with ``complete`` False and a note naming the missing file, and reads the others.
The folder is a real Flink 2.3 heap checkpoint (``types-heap-checkpoint``) with an older copy of its
``chk-N`` (the metadata names its files relative to its own folder) from which one state file is deleted.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import explorer
from explorer.analysis.history import checkpoint_summary
from explorer.errors import SnapshotError

FIXTURE = Path(__file__).resolve().parents[2] / "sample_data" / "flink" / "production" / "types-heap-checkpoint"


@pytest.fixture(params=[0, 1], ids=["first-file", "second-file"])
def job(tmp_path, request):
    job = tmp_path / "job"
    shutil.copytree(FIXTURE, job)
    (chk,) = job.glob("chk-*")
    n = int(chk.name.split("-")[1])
    older = job / f"chk-{n - 1}"
    shutil.copytree(chk, older)
    gone = sorted(p for p in older.iterdir() if p.name != "_metadata")[request.param]
    gone.unlink()  # (one subtask's file fails when opening, the other when its entries are read)
    return job, n, older, gone


def test_opening_the_half_deleted_checkpoint_alone_errors(job):
    _, _, older, gone = job
    with pytest.raises(SnapshotError, match=gone.name):
        explorer.open(older).keyed_state()


@pytest.mark.parametrize("per_state", [True, False])
def test_history_shows_it_incomplete_and_goes_on(job, per_state):
    job, n, older, gone = job
    expected = json.loads((FIXTURE / "EXPECTED.json").read_text())
    h = explorer.history(job, per_state=per_state)
    bad = h[~h["complete"]]
    assert list(bad["checkpoint_id"]) == [n - 1]  # the folder's id: its metadata could not be read whole
    assert bad.iloc[0]["path"] == str(older)
    assert gone.name in bad.iloc[0]["note"] and "cannot be read" in bad.iloc[0]["note"]
    assert bad.iloc[0]["entries"] is pd_NA_or_none(bad.iloc[0]["entries"])
    assert h.attrs["notes"] == [bad.iloc[0]["note"]]
    good = h[h["complete"]]
    assert set(good["checkpoint_id"]) == {n} and good["note"].isna().all()
    assert list(h["checkpoint_id"]) == sorted(h["checkpoint_id"])  # oldest first, the broken one in place
    entries = {(op, st): len(s["entries"]) for op, o in expected["operators"].items()
               for st, s in o["states"].items()}
    if per_state:
        got = {(r.operator, r.state): int(r.entries) for r in good.itertuples()}
        for k, v in entries.items():  # every state of the complete checkpoint, as its job wrote it
            if k[1] != "kryo":
                assert got[k] == v, k
    else:
        assert int(good.iloc[0]["entries"]) >= sum(entries.values()) - entries.get(("user-types", "kryo"), 0)
        # the complete checkpoint is compared with nothing before it: the broken one has no figures
        assert int(good.iloc[0]["incremental_bytes"]) == int(good.iloc[0]["checkpoint_bytes"])
    summary = checkpoint_summary(h) if per_state else None
    if summary is not None:
        assert list(summary["checkpoint_id"]) == [n - 1, n]
        assert list(summary["complete"]) == [False, True]


def pd_NA_or_none(v):
    import pandas as pd
    return v if (v is None or v is pd.NA) else object()


def test_diff_and_open_of_the_folder_skip_it(job):
    """The folder opens as its newest checkpoint; diffing it with itself reads every key."""
    job, n, _, _ = job
    snap = explorer.open(job)
    assert snap.path.name == f"chk-{n}"
    d = explorer.diff(job, snap.path)
    assert len(d) and set(d["status"]) == {"unchanged"}
