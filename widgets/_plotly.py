"""plotly.js loaded once per page, and figures that never miss an update while it loads.

plotly 6 makes ``FigureWidget`` an anywidget whose model carries the whole plotly.js
bundle (about 5 MB) as its ES module. anywidget imports that module once *per model*
(a new blob URL each time, so the browser evaluates plotly.js again for every figure:
two dashboards with 12 figures took 423 MB of JS heap) and gives each model 2 s to
load it: past that, the model's ``ready`` promise is rejected for good, and anywidget
drops every later message to that model (its ``_handle_comm_msg`` awaits ``ready``).
The updates that fill a figure then never reach the browser, and the figure stays the
empty axes it was created with. On a busy machine, with several figures importing
5 MB each at the same time, that happened to a figure or two per dashboard.

Here a figure's module is a few lines that load at once (so its model is ready within
the 2 s and gets every message), and plotly.js comes from one :class:`PlotlyLibrary`
widget per kernel, imported once per page. Until that import is done a figure's model
keeps the full state the views send after every update (``sync_figure``) and its view
waits; then plotly's own widget code takes over that model and draws it.

Closing a notebook gives its dashboards' memory back: JupyterLab keeps a closed notebook's
widget manager, with every model, and anywidget keeps every model it has seen until the model
is closed, so each closed dashboard left about 12 MB of JS heap and its plotly graphs behind.
The small modules close a manager's models (in the page only, the kernel keeps its widgets) when
its document is disposed, a figure's views take their listeners off the model when removed, and
the library drops the bundle's text once it has been imported
(tests/ui/test_dashboard_formats.py measures the heap across dashboards opened and closed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import traitlets

#: what every copy of the small modules below shares in a page: one promise of plotly's widget module, and
#: the release of a closed notebook's models (see ``releaseWithDocument``)
_REGISTRY_JS = """
function plotlyRegistry() {
  const g = globalThis;
  if (!g.__stateExplorerPlotly) {
    let resolve, reject;
    const promise = new Promise((res, rej) => { resolve = res; reject = rej; });
    g.__stateExplorerPlotly = { promise, resolve, reject, loading: false, managers: new WeakSet(), releasing: 0 };
  }
  return g.__stateExplorerPlotly;
}

// JupyterLab's widget manager neither closes a notebook's widget models when the notebook closes nor is
// itself released (a signal of the page's widget registry keeps it), and anywidget keeps every model it
// has seen until that model is closed: a closed dashboard (its models, their state and the views plotly
// drew) stayed in the page. When the document a widget manager belongs to is disposed, its models are
// closed here on this side only (the kernel keeps its widgets; a notebook opened again gets them anew
// from the kernel), then the manager forgets them, as its clear_state does.
function releaseWithDocument(manager) {
  const registry = plotlyRegistry();
  const context = manager && manager.context;
  if (!context || !context.disposed || typeof context.disposed.connect !== "function" ||
      context.isDisposed || registry.managers.has(manager)) return;
  registry.managers.add(manager);
  context.disposed.connect(async () => {
    // how many closed documents are still being released (the page-side release is asynchronous)
    registry.releasing += 1;
    try {
      const models = manager._models || {};
      await Promise.all(Object.keys(models).map((id) => Promise.resolve(models[id]).then(
        (m) => m && typeof m.close === "function" && m.close(true), () => {})));
      if (typeof manager.clear_state === "function") await manager.clear_state();
    } catch (error) {
      console.debug("[state-explorer] widget manager not cleared", error);
    } finally {
      registry.releasing -= 1;
    }
  });
}
"""

#: the library widget's module: imports the bundle it carries, once per page, without making its model wait
LIBRARY_ESM = _REGISTRY_JS + """
export default {
  initialize({ model }) {
    releaseWithDocument(model.widget_manager);
    const registry = plotlyRegistry();
    const bundle = model.get("bundle");
    // the 5 MB string is not kept in the model once read (set twice: Backbone keeps the previous value once)
    model.set("bundle", "");
    model.set("bundle", "");
    if (registry.loading) return;
    registry.loading = true;
    const url = URL.createObjectURL(new Blob([bundle], { type: "text/javascript" }));
    import(url).then(
      (mod) => { URL.revokeObjectURL(url); registry.resolve(mod); },
      (error) => { URL.revokeObjectURL(url); registry.loading = false; console.error("[state-explorer] plotly.js did not load", error); registry.reject(error); },
    );
  },
};
"""

#: a figure's module: plotly's own widget definition for this model once plotly.js is in, views wait for it
FIGURE_ESM = _REGISTRY_JS + """
export default () => {
  let plotlyWidget = null;
  let loaded = null;
  let own = null;
  let recording = null;
  return {
    initialize({ model }) {
      releaseWithDocument(model.widget_manager);
      // plotly's view adds listeners to the model it is given and never removes them, so every view
      // drawn stayed reachable from the model: it gets a model that records the listeners a view adds
      own = model;
      const recorded = Object.assign({}, model, {
        on(name, callback) {
          model.on(name, callback);
          if (recording) recording.push([name, callback]);
        },
      });
      // not awaited: anywidget would drop this model's messages if initialising took over 2 s
      loaded = plotlyRegistry().promise.then((mod) => {
        plotlyWidget = mod.default();
        plotlyWidget.initialize({ model: recorded });
      });
    },
    async render({ el }) {
      await loaded;
      const listeners = [];
      recording = listeners;
      let cleanup;
      try {
        cleanup = plotlyWidget.render({ el });
      } finally {
        recording = null;
      }
      return () => {
        if (typeof cleanup === "function") cleanup();
        for (const [name, callback] of listeners) own.off(name, callback);
        listeners.length = 0;
      };
    },
  };
};
"""


def plotly_bundle_path() -> Path:
    """plotly's widget bundle (plotly.js and its FigureWidget code), as the installed plotly ships it."""
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "widgetbundle.js"


class PlotlyLibrary(anywidget.AnyWidget):
    """Carries plotly.js to the page once; never displayed. One per kernel: :func:`plotly_library`."""

    _esm = LIBRARY_ESM
    bundle = traitlets.Unicode("").tag(sync=True)


_library: PlotlyLibrary | None = None


def plotly_library() -> PlotlyLibrary:
    """The kernel's :class:`PlotlyLibrary`, made (and its comm opened) on first use."""
    global _library
    if _library is None or _library.comm is None:
        _library = PlotlyLibrary(bundle=plotly_bundle_path().read_text(encoding="utf-8"))
    return _library


_figure_class: type | None = None


def figure_widget_class() -> type:
    """``go.FigureWidget`` with the small module above instead of the 5 MB bundle (made on first use:
    importing plotly's FigureWidget costs seconds, see ``View.sync_figures``)."""
    global _figure_class
    if _figure_class is None:
        import plotly.graph_objects as go

        class SharedPlotlyFigureWidget(go.FigureWidget):  # type: ignore[misc]
            """A FigureWidget whose browser side takes plotly.js from the page's :class:`PlotlyLibrary`."""

            _esm = FIGURE_ESM

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                plotly_library()  # its comm opens first, so the page starts loading plotly.js before any figure
                super().__init__(*args, **kwargs)

        _figure_class = SharedPlotlyFigureWidget
    return _figure_class
