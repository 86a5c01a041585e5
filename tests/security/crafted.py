"""Crafted snapshots of the security suites: what someone else could write, built with the engine (so every
byte but the hostile strings is a valid snapshot) and, where the engine would not write it, by editing the
metadata the way an attacker would."""

from __future__ import annotations

import shutil
from pathlib import Path

#: runs script when rendered as HTML
HOSTILE_HTML = "<img src=x onerror=alert(1)>"
#: a live link when plotly renders it as its mini-HTML
HOSTILE_LINK = '<a href="https://evil.example">/api/search</a>'
#: retitles the terminal, clears the screen, a hidden OSC 8 hyperlink, a right-to-left override, C1 CSI, DEL
HOSTILE_TERMINAL = ("\x1b]0;pwned\x07\x1b[2J\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"
                    "\u202etxt.exe\u2066x\u2069\x9b31m\x7f")

#: shown as "txt.exe" reversed: a right-to-left override
HOSTILE_BIDI = "\u202eexe.txt"


def hostile_job(root: Path, operator: str = HOSTILE_HTML, checkpoints: str = HOSTILE_HTML,
                keys: tuple[str, ...] = (HOSTILE_LINK, HOSTILE_TERMINAL, HOSTILE_HTML, HOSTILE_BIDI)) -> tuple[Path, Path]:
    """Run a small keyed job whose operator is named ``operator`` and whose keys include ``keys``, with
    checkpoints in a folder named ``checkpoints``; returns ``(savepoint, checkpoint directory)``."""
    import explorer.engine as eng
    from explorer.engine import KeyedProcessFunction, ValueStateDescriptor

    class Count(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", int))

        def process_element(self, value, ctx, out):
            self.count.update((self.count.value() or 0) + 1)

    records = [(k, i) for i, k in enumerate(list(keys) * 20 + [f"user-{i}" for i in range(40)])]
    env = eng.StreamEnvironment(parallelism=2, max_parallelism=128, state_backend="heap",
                                state_dir=root / "work", batch_size=16)
    env.enable_checkpointing(root / checkpoints, interval_records=10**9, retained=5)
    env.from_collection(records).key_by(0).process(Count(), name=operator)
    client = env.execute_async("hostile")
    client.run(until=lambda rt: sum(st.operator.records_in for st in rt.subtasks if st.is_source) >= 40)
    client.trigger_checkpoint()
    client.run()
    client.trigger_checkpoint()
    sp = client.trigger_savepoint(root / "sp")
    client.close()
    return sp, root / checkpoints


def with_metadata(snapshot: Path, into: Path, **changes) -> Path:
    """A copy of the engine snapshot ``snapshot`` at ``into`` whose metadata has ``changes`` (what an attacker
    would write: the metadata carries no signature)."""
    from explorer.format.snapshot import read_metadata, write_metadata

    shutil.copytree(snapshot, into)
    meta = read_metadata(into)
    meta.update(changes)
    write_metadata(into, meta)
    return into
