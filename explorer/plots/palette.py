"""The one palette: every colour a figure, dashboard or notebook widget draws, by what it is for.

Figures cycle :data:`PALETTE` per trace (one colour per subtask, the same in every view); the named
colours below say what they mark. Nothing else in ``explorer/plots``, ``widgets/`` or the HTML report
(``explorer/report.py``) types a colour
(``tests/plots/test_palette.py`` fails on a colour literal outside this module). Light on purpose:
no plotly or pandas, so a dashboard's loading line takes its colours from here before the tabs load.
"""

from __future__ import annotations

__all__ = ["BASELINE", "COLOURS", "ERROR", "ERROR_SURFACE", "EXPIRED_COLOR", "GUIDE", "INK", "MUTED", "PAPER", "ON_COLOUR",
           "PALETTE", "QUIET", "RULE", "SURFACE", "TEXT", "VEIL", "WAITING", "WARNING",
           "WARNING_SURFACE", "WARNING_TEXT"]

#: the one palette of every figure and dashboard (plotly's qualitative palette), cycled per trace
PALETTE = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880", "#FF97FF",
           "#FECB52")

# --- in figures --------------------------------------------------------------------------------
#: what has expired but is still stored
EXPIRED_COLOR = "#7F7F7F"
#: marks and reference lines drawn over the data (the current parallelism, incremental bytes, "now"),
#: and dark text beside them
INK = "#444444"
#: guides behind the data (equality line, perfect balance, a mean), idle channels, table rules
GUIDE = "#C8C8C8"
#: a what-if's "before" (the bars it is compared with)
BASELINE = "#B0B0B0"
#: what is done and out of the way (a finished task in the teaching views)
QUIET = "#D0D0D0"
#: what runs and waits for nothing yet (a running task in the teaching views): the first colour, pale
WAITING = "#9DB4D3"

# --- around figures (HTML of the dashboards) -----------------------------------------------------
#: body text (the report's)
TEXT = "#222222"
#: secondary text: captions, notes, the loading line
MUTED = "#666666"
#: light rules between table rows
RULE = "#EEEEEE"
#: table headers
SURFACE = "#F5F5F5"
#: the page's white: text on a coloured badge, a hollow marker, behind a label
PAPER = "#FFFFFF"
#: behind a label drawn over the data (the page's white, see-through)
VEIL = "rgba(255,255,255,0.8)"
#: an error's text and border, and its background
ERROR = "#D62728"
ERROR_SURFACE = "#FDECEA"
#: a hint that something is missing (a TTL's length), and its background
WARNING = PALETTE[4]
WARNING_SURFACE = "#FFF6EC"
#: a note's text (the warning's colour, dark enough to read on white)
WARNING_TEXT = "#AA6600"

#: every colour a figure or widget may use
COLOURS = frozenset(PALETTE) | {EXPIRED_COLOR, INK, GUIDE, BASELINE, QUIET, WAITING, MUTED, RULE, SURFACE,
                                PAPER, VEIL, ERROR, ERROR_SURFACE, WARNING, WARNING_SURFACE,
                                TEXT, WARNING_TEXT}
