"""Checkpoint storage: ``chk-N/`` folders under a checkpoint directory.

A checkpoint is complete exactly when its ``_metadata`` exists (it is written
last, via rename). Folders without it are leftovers of a crash or an abort
and are never offered for restore. ``shared/`` holds files that incremental
checkpoints share, reference-counted by the checkpoints that name them.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from ...errors import SnapshotError
from ...format.snapshot import METADATA_FILE, is_snapshot_folder, read_metadata, verify_snapshot

_CHK = re.compile(r"^chk-(\d+)$")


class CheckpointStorage:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "shared").mkdir(exist_ok=True)

    def folder_for(self, checkpoint_id: int) -> Path:
        return self.directory / f"chk-{checkpoint_id}"

    def all_ids(self) -> list[int]:
        ids = []
        for p in self.directory.iterdir():
            m = _CHK.match(p.name)
            if m and p.is_dir():
                ids.append(int(m.group(1)))
        return sorted(ids)

    def completed_ids(self) -> list[int]:
        return [i for i in self.all_ids() if is_snapshot_folder(self.folder_for(i))]

    def latest_id(self) -> int:
        ids = self.all_ids()
        return ids[-1] if ids else 0

    def latest_valid(self) -> Path | None:
        """The newest complete checkpoint whose metadata and files check out; older ones on damage."""
        for cid in reversed(self.completed_ids()):
            folder = self.folder_for(cid)
            try:
                verify_snapshot(folder)
            except SnapshotError:
                continue
            return folder
        return None

    def retain(self, count: int) -> list[int]:
        """Delete complete checkpoints beyond the newest ``count`` and incomplete leftovers older than them."""
        done = self.completed_ids()
        keep = set(done[-count:])
        removed = []
        newest_kept = max(keep) if keep else 0
        for cid in self.all_ids():
            if cid in keep:
                continue
            if cid in done or cid < newest_kept:
                shutil.rmtree(self.folder_for(cid), ignore_errors=True)
                removed.append(cid)
        self._collect_shared(keep)
        return removed

    def _collect_shared(self, keep: set[int]) -> None:
        """Drop shared files that no retained checkpoint names any more (reference counting)."""
        shared = self.directory / "shared"
        referenced: set[str] = set()
        for cid in keep:
            try:
                meta = read_metadata(self.folder_for(cid))
            except SnapshotError:
                continue
            for rel in meta.get("files", {}):
                if rel.startswith("../shared/"):
                    referenced.add(rel[len("../shared/"):])
        for p in shared.rglob("*"):
            if p.is_file() and str(p.relative_to(shared)) not in referenced:
                p.unlink()

    def clean_incomplete(self) -> list[int]:
        gone = []
        for cid in self.all_ids():
            f = self.folder_for(cid)
            if not (f / METADATA_FILE).exists():
                shutil.rmtree(f, ignore_errors=True)
                gone.append(cid)
        return gone


def metadata_of(folder: Path) -> dict:
    return read_metadata(folder)
