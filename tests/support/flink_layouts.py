"""Compare a production-style Flink snapshot's decoded state with the EXPECTED.json its job wrote (tools/flink/README.md).

The matching rules (what equals an expected value, how keys compare) are the survey's,
``tools/flink/check_fixtures.py``, loaded from there so that tests and survey agree on what "equal" means.
"""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ROOT / "sample_data" / "flink" / "production"


@lru_cache(maxsize=1)
def survey() -> ModuleType:
    spec = importlib.util.spec_from_file_location("flink_check_fixtures", ROOT / "tools" / "flink" / "check_fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def expected(name: str) -> dict:
    return json.loads((PRODUCTION / name / "EXPECTED.json").read_text(encoding="utf-8"))


def mismatches(snap: Any, name: str) -> list[str]:
    """Every expected state of fixture ``name`` that ``snap`` does not decode to the job's values: one line
    per state (empty when every entry of every state equals EXPECTED.json and no state has extra rows)."""
    exp = expected(name)
    mod = survey()
    ops = sorted(set(snap.states["operator"]))
    out = []
    for uid, op in exp["operators"].items():
        real = mod.resolve_operator(ops, uid, exp.get("operator_match", "uid"))
        if real is None:
            out.append(f"operator {uid!r} not found in {ops}")
            continue
        for state, spec in op["states"].items():
            r = mod.check_state(snap, real, state, spec, [])
            if r["status"] != "OK":
                out.append(f"{real}/{state}: {r['status']} {r.get('example', '')}")
    return out
