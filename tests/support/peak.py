"""Peak memory of a piece of code, measured in a child process (issue 29's memory-bomb tests).

The child runs ``code`` (which sets ``result``), then reports ``result`` and its own high-water mark
(``VmHWM`` of ``/proc/self/status``, what the kernel saw at the peak: behaviour, not timing). A
``MemoryError`` or a crash of the child shows as its output, never as this test process's.

With ``STATE_EXPLORER_PEAK_LOG=FILE`` set, each measurement is also appended to ``FILE`` as a JSON
line (the test, its peak in MiB): how the bomb cases' peaks are quoted, e.g.
``STATE_EXPLORER_PEAK_LOG=/tmp/peaks.jsonl python -m pytest tests/security -k memory``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: defined in every child: ``raised(fn)`` is ``"Name: message"`` of what ``fn()`` raised, or ``"ok"``
_PROLOGUE = """
def raised(fn):
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - the test reads what was raised
        return type(exc).__name__ + ": " + str(exc)
    return "ok"
"""

_EPILOGUE = """
import json as _json
with open("/proc/self/status") as _f:
    _hwm = next(int(line.split()[1]) for line in _f if line.startswith("VmHWM:"))
print("@@PEAK@@" + _json.dumps({"peak_kib": _hwm, "result": result}))
"""


def peak_of(code: str, timeout: float = 300) -> tuple[float, object]:
    """(peak resident MiB, ``result``) of ``code`` run in a fresh Python child (``raised`` defined)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _PROLOGUE + textwrap.dedent(code) + _EPILOGUE], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@PEAK@@")]
    assert proc.returncode == 0 and lines, f"child failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    out = json.loads(lines[-1][len("@@PEAK@@"):])
    if os.environ.get("STATE_EXPLORER_PEAK_LOG"):
        with open(os.environ["STATE_EXPLORER_PEAK_LOG"], "a") as log:
            test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
            log.write(json.dumps({"test": test, "peak_mib": round(out["peak_kib"] / 1024, 1)}) + "\n")
    return out["peak_kib"] / 1024, out["result"]
