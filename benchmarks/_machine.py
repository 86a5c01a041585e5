"""What every benchmark result records about where it ran."""

from __future__ import annotations

import datetime as _dt
import os
import platform
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    try:
        load = os.getloadavg()
    except OSError:  # pragma: no cover
        load = None
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) // 1024
    except OSError:  # pragma: no cover
        pass
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.machine(),
        "cpus": os.cpu_count(),
        "memory_mb": mem,
        "load_average": load,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def result_path(name: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    return RESULTS / f"{name}.json"
