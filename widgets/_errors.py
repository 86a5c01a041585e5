"""An error area: callback errors shown in the dashboard instead of lost in the kernel log.

An exception raised inside an ipywidgets observer goes to the kernel's log,
where a notebook user never sees it (ipywidgets issues #1971, #2612). Every
callback of the dashboards runs under :meth:`ErrorArea.guard`, which shows the
exception (its type, message and a folded traceback) in an HTML widget placed
in the dashboard, keeps it on ``.last_error``, and clears it on the next
successful update.
"""

from __future__ import annotations

import functools
import html
import traceback
from typing import Any, Callable, TypeVar

import ipywidgets as w

from explorer.plots.palette import ERROR, ERROR_SURFACE

F = TypeVar("F", bound=Callable[..., Any])


def failed_html(exc: BaseException, where: str) -> str:
    """The line that replaces a loading line when the work it announced failed (no spinner left)."""
    return (f"<div class='sx-failed' style='padding:12px;color:{ERROR};font-size:13px'>"
            f"<b>{html.escape(where)} failed</b>: {html.escape(f'{type(exc).__name__}: {exc}')}</div>")


class ErrorArea(w.HTML):
    """Shows the last callback error (empty and hidden while all is well)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(value="", **kwargs)
        self.last_error: BaseException | None = None
        self.layout.display = "none"

    def show(self, exc: BaseException, where: str = "") -> None:
        """Display ``exc`` (raised while doing ``where``)."""
        self.last_error = exc
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        title = f"{type(exc).__name__}: {exc}"
        self.value = (
            f'<div style="border-left:4px solid {ERROR};background:{ERROR_SURFACE};padding:6px 10px;margin:4px 0">'
            f"<b>Error{' while ' + html.escape(where) if where else ''}</b>: {html.escape(title)}"
            f"<details><summary>traceback</summary><pre style='font-size:11px'>{html.escape(tb)}</pre></details>"
            "</div>"
        )
        self.layout.display = None

    def clear(self) -> None:
        self.last_error = None
        self.value = ""
        self.layout.display = "none"

    def guard(self, where: str) -> Callable[[F], F]:
        """Decorator: run the callback; on an exception show it here instead of raising."""

        def deco(fn: F) -> F:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                try:
                    out = fn(*args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - shown to the user, not swallowed
                    self.show(exc, where)
                    return None
                if self.last_error is not None:
                    self.clear()
                return out

            return wrapper  # type: ignore[return-value]

        return deco
