"""What the teaching notebooks show, checked in their source (the suite also runs them)."""

import json
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _code(name: str) -> str:
    nb = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


def test_flink_hot_keys_uses_the_public_api_and_the_dashboard():
    code = _code("flink_hot_keys.ipynb")
    assert "explorer.open(" in code and "widgets.explore(" in code and "_metadata" in code
    assert "explorer.readers" not in code and "KeyedStateQuery" not in code and "FlinkSnapshotReader" not in code


def test_salting_is_shown_on_the_traffic_it_moves():
    code = _code("07_hot_keys_and_salting.ipynb")
    salting_plots = [line for line in code.splitlines() if "plots.subtask_bars(" in line]
    assert len(salting_plots) >= 3  # the what-if that helps, the one that does not, salting for real (issue 30)
    assert all('y="records"' in line for line in salting_plots), salting_plots
    assert "assert busiest(good, \"after\")[1] < busiest(good, \"before\")[1]" in code


def test_checkpoint_history_runs_on_a_clock_with_real_dates():
    code = _code("04_checkpoints_and_barriers.ipynb")
    assert "ManualClock(0)" not in code and "ManualClock(START_MS)" in code
