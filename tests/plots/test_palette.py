"""One palette (issue 30): no colour is typed anywhere in the figures or widgets but in explorer/plots/palette.py.

The dashboards had their own greys and blues beside the figures' palette ("lightgray", "#B0B0B0",
"#636EFA" typed again, "black" for TTL's "now", "gray" for a mean), the report its own CSS greys. Every
string of every module of ``explorer/plots`` and ``widgets`` and of ``explorer/report.py`` (docstrings aside) and the JupyterLab extension's source is read
and a colour in it fails the test: ``#rgb`` / ``#rrggbb`` / ``#rrggbbaa`` (not ``#rgba``: four digits
are an issue number, ``#1971``), ``rgb()``, ``rgba()``,
``hsl()``, and a CSS colour name given as a whole value (``color="gray"``) or in a style
(``color:white``).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from _plotly_utils.basevalidators import ColorValidator

from explorer.plots import palette

REPO = Path(__file__).resolve().parents[2]
PALETTE_MODULE = REPO / "explorer" / "plots" / "palette.py"

NAMES = sorted({n.lower() for n in ColorValidator.named_colors} | {"transparent"}, key=len, reverse=True)
_NAMED = "|".join(NAMES)
HEX = re.compile(r"(?<![&\w])#(?:[0-9a-fA-F]{8}|[0-9a-fA-F]{6}|[0-9a-fA-F]{3})(?![\w-])")
FUNCTION = re.compile(r"\b(?:rgba?|hsla?)\s*\(", re.I)
IN_STYLE = re.compile(r"(?:color|background(?:-color)?|border(?:-[a-z]+)*|fill|stroke|outline)\s*:\s*[^;'\"}<]*?"
                      rf"\b(?:{_NAMED})\b(?![\w-])", re.I)
WHOLE = re.compile(rf"\s*(?:{_NAMED})\s*", re.I)


def colours_in(text: str) -> list[str]:
    """The colour literals in one string."""
    found = HEX.findall(text) + [m.group(0) for m in FUNCTION.finditer(text)] + [m.group(0) for m in IN_STYLE.finditer(text)]
    if WHOLE.fullmatch(text):
        found.append(text)
    return found


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # attribute docs, bare notes
            out.add(id(node.value))
    return out


def python_colours(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    skip = _docstrings(tree)
    return [(node.lineno, c) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            for c in colours_in(node.value)]


def script_colours(path: Path) -> list[tuple[int, str]]:
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        code = line.split("//", 1)[0] if path.suffix == ".js" else line
        out += [(n, c) for c in colours_in(code)]
    return out


def _sources() -> list[Path]:
    files = sorted((REPO / "explorer" / "plots").rglob("*.py")) + sorted((REPO / "widgets").glob("*.py"))
    files.append(REPO / "explorer" / "report.py")  # the HTML report: the same palette as the dashboards
    src = REPO / "widgets" / "labextension" / "src"
    files += sorted(p for p in src.rglob("*") if p.suffix in (".js", ".css"))
    return [p for p in files if p != PALETTE_MODULE]


def test_the_scanner_finds_every_form_of_colour():
    for text in ("#636EFA", "color:#555;x", "#ccc", "rgba(255,255,255,0.8)", "rgb(1, 2, 3)", "gray", " lightgray ",
                 "padding:1px;color:white;margin:0", "border-left:4px solid black", "background: WhiteSmoke"):
        assert colours_in(text), text
    for text in ("issue #1971 and #2612 ", "&#123;", "white-space:nowrap", "plotly_white", "a grey bar", "red flag",
                 "the black box", "#section-name", "x{color:{MUTED}}"):
        assert not colours_in(text), text


def test_no_colour_is_typed_outside_the_palette_module():
    found = {f"{p.relative_to(REPO)}:{line}": c for p in _sources()
             for line, c in (python_colours(p) if p.suffix == ".py" else script_colours(p))}
    assert not found, f"colours typed in place, not taken from explorer/plots/palette.py: {found}"


def test_the_palette_names_every_colour_once_and_loads_light():
    named = {k: v for k, v in vars(palette).items() if k.isupper() and isinstance(v, str)}
    assert set(named.values()) | set(palette.PALETTE) == palette.COLOURS
    assert len(set(palette.PALETTE)) == len(palette.PALETTE) == 10
    # the dashboards' loading line takes its colours from here before the tabs' plotly and pandas are loaded
    code = ("import sys, widgets, widgets._view, widgets._errors, explorer.plots.palette, explorer.plots.format; "
            "print(sorted(m for m in ('plotly', 'explorer.plots._charts', 'explorer.analysis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
