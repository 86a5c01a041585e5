"""A disk that fills while the engine writes a checkpoint: a clean CheckpointError (issue 16),
the torn checkpoint aborted and removed, the completed ones untouched and restorable."""

from __future__ import annotations

import errno

import pytest

import explorer
from explorer.engine import CollectSink
from explorer.engine.checkpoint import coordinator
from explorer.errors import CheckpointError, JobError, StateExplorerError
from explorer.stored import checkpoints_in

from .test_checkpointing import make_env


def _full(real):
    """``real``, failing with ENOSPC from the second checkpoint on (the disk is full then)."""
    def write(*args, **kwargs):
        folder = next(a for a in args if hasattr(a, "name") and str(a.name).startswith("chk-"))
        if folder.name != "chk-1":
            raise OSError(errno.ENOSPC, "No space left on device", str(folder))
        return real(*args, **kwargs)
    return write


@pytest.mark.parametrize("where", ["write_metadata", "write_capture"])
def test_disk_full_is_a_clean_checkpoint_error_and_nothing_torn_is_complete(tmp_path, monkeypatch, where):
    monkeypatch.setattr(coordinator, where, _full(getattr(coordinator, where)))
    chk = tmp_path / "chk"
    env = make_env(chk, CollectSink(), asynchronous=False)
    with pytest.raises(CheckpointError, match="ENOSPC") as info:
        env.execute()
    assert isinstance(info.value, (JobError, StateExplorerError))
    assert "aborted" in str(info.value)
    done = checkpoints_in(chk)
    assert [p.name for p in done] == ["chk-1"]
    assert not any(p.name.startswith("chk-") and p not in done for p in chk.iterdir())  # the torn one is gone
    assert len(explorer.open(chk).keyed_state()) > 0
