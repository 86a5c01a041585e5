"""Checkpoint storage: ``chk-N/`` folders under a checkpoint directory.

A checkpoint is complete exactly when its ``_metadata`` exists (it is written
last, via rename). Folders without it are leftovers of a crash or an abort
and are never offered for restore. ``shared/`` holds files that incremental
checkpoints share, reference-counted by the checkpoints that name them.

Shared files are also *held* while a checkpoint that names them is still in
flight (:meth:`CheckpointStorage.hold` / :meth:`release`): its ``_metadata``
does not exist yet, so without the hold :meth:`retain` running for an older
checkpoint would delete a file the newer one has just uploaded or decided to
reuse (Flink's ``SharedStateRegistry`` plays this part).
"""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from pathlib import Path

from ...errors import SnapshotError
from ...format.checkpoint_dir import checkpoint_folders, folder_name
from ...format.snapshot import METADATA_FILE, is_snapshot_folder, read_metadata, verify_snapshot


class CheckpointStorage:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "shared").mkdir(exist_ok=True)
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()  # shared path (relative to shared/) -> in-flight holders
        self._holders: dict[int, list[str]] = {}

    # --- shared files held by checkpoints in flight ------------------------------------------
    def hold(self, checkpoint_id: int, shared_rel: str) -> bool:
        """Protect ``shared/<shared_rel>`` for checkpoint ``checkpoint_id`` until :meth:`release`.

        Returns whether the file exists now (if not, the caller must upload it;
        the hold already protects the name). Safe to call from upload threads.
        """
        with self._lock:
            self._held[shared_rel] += 1
            self._holders.setdefault(checkpoint_id, []).append(shared_rel)
            return (self.directory / "shared" / shared_rel).is_file()

    def release(self, checkpoint_id: int) -> None:
        """Drop the holds of a checkpoint (completed: its metadata names the files now; or aborted)."""
        with self._lock:
            for rel in self._holders.pop(checkpoint_id, []):
                self._held[rel] -= 1
                if self._held[rel] <= 0:
                    del self._held[rel]

    def folder_for(self, checkpoint_id: int) -> Path:
        return self.directory / folder_name(checkpoint_id)

    def all_ids(self) -> list[int]:
        return [n for n, _ in checkpoint_folders(self.directory, lambda p: p.is_dir())]

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

    def retain(self, count: int, in_flight: set[int] | frozenset[int] = frozenset()) -> list[int]:
        """Delete complete checkpoints beyond the newest ``count`` and incomplete leftovers older than them.

        ``in_flight`` names checkpoints still being written (with max_concurrent > 1 an older one
        can still be in flight when a newer one completes): their folders stay.
        """
        done = self.completed_ids()
        keep = set(done[-count:])
        removed = []
        newest_kept = max(keep) if keep else 0
        for cid in self.all_ids():
            if cid in keep or cid in in_flight:
                continue
            if cid in done or cid < newest_kept:
                shutil.rmtree(self.folder_for(cid), ignore_errors=True)
                removed.append(cid)
        self._collect_shared(keep)
        return removed

    def _collect_shared(self, keep: set[int]) -> None:
        """Drop shared files that no retained checkpoint names any more (reference counting);
        files held by a checkpoint in flight stay."""
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
        with self._lock:
            for p in shared.rglob("*"):
                if not p.is_file():
                    continue
                rel = p.relative_to(shared).as_posix()
                if rel not in referenced and rel not in self._held:
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
