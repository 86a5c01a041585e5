"""pyproject.toml and environment.yml must name the same dependencies."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~ \[]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _env_names() -> set[str]:
    names = set()
    for line in (ROOT / "environment.yml").read_text().splitlines():
        m = re.match(r"^\s*-\s+([A-Za-z0-9_.\-]+)", line)
        if m and m.group(1) not in ("pip", "conda-forge") and not line.strip().startswith("- -e"):
            names.add(_name(m.group(1)))
    return names


def test_environment_yml_matches_pyproject():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())
    deps = {_name(d) for d in py["project"]["dependencies"]}
    deps |= {_name(d) for d in py["project"]["optional-dependencies"]["test"]}
    env = _env_names() - {"python", "openjdk"}
    assert deps - env == set(), f"in pyproject.toml but not environment.yml: {sorted(deps - env)}"
    assert env - deps == set(), f"in environment.yml but not pyproject.toml: {sorted(env - deps)}"


def test_version_pins_agree():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = {_name(d): d for d in py["project"]["dependencies"] if "==" in d}
    text = (ROOT / "environment.yml").read_text()
    for name, req in pins.items():
        version = req.split("==")[1]
        assert re.search(rf"{re.escape(name)}\s*[=]{{1,2}}\s*{re.escape(version)}", text), f"{name} pin {version} differs"
