// A JupyterLab file-browser command: "Open in State Explorer" on a folder (a checkpoint,
// a savepoint or a checkpoint directory) or on a `_metadata` file. It makes a new notebook named
// after the snapshot in a `state-explorer/` folder of the user at the root of the server (never in
// or beside the snapshot: that folder was written by someone else, and a kernel imports from its
// working folder first), writes `widgets.explore("<snapshot>")` into its first cell behind a prelude that
// takes the working folder off sys.path (explorer/ipython.py: notebook_cell, the same text), and
// runs it, so the dashboard opens in that notebook.
//
// Plain JavaScript (no TypeScript step); built into ../prebuilt by build.sh with
// @jupyterlab/builder, and the built files are committed and shipped in the wheel.
import { IFileBrowserFactory } from '@jupyterlab/filebrowser';

export const COMMAND = 'state-explorer:open-dashboard';

function parentOf(path) {
  const i = path.lastIndexOf('/');
  return i < 0 ? '' : path.slice(0, i);
}

function baseName(path) {
  const i = path.lastIndexOf('/');
  return i < 0 ? path : path.slice(i + 1);
}

// The snapshot folder an item of the file browser stands for, or null.
export function snapshotOf(item) {
  if (!item) {
    return null;
  }
  if (item.type === 'directory') {
    return item.path;
  }
  if (item.name === '_metadata') {
    return parentOf(item.path);
  }
  return null;
}

// Where the notebooks go: a folder of the user at the root of the server.
export const NOTEBOOKS = 'state-explorer';

// The working folder off sys.path before anything is imported: explorer/ipython.py SAFE_PRELUDE.
export const PRELUDE =
  'import sys, os  # State Explorer: the installed package only, never a module beside this notebook\n' +
  "sys.path[:] = [p for p in sys.path if p not in ('', '.') and os.path.abspath(p) != os.getcwd()]\n";

// The code of the first cell of the notebook, run in a kernel whose working directory is NOTEBOOKS
// (explorer/ipython.py: notebook_cell).
export function cellSource(snapshot) {
  const rel = snapshot === '' ? '..' : `../${snapshot}`;
  return `${PRELUDE}import widgets\n\nwidgets.explore(${JSON.stringify(rel)})`;
}

// The file name of the notebook: the name of the snapshot, in plain characters.
export function notebookName(snapshot) {
  let name = baseName(snapshot).replace(/[^A-Za-z0-9._-]+/g, '_');
  name = name.replace(/^[.]+/, '');
  return (name || 'snapshot').slice(0, 100);
}

const plugin = {
  id: 'state-explorer-labextension:open-dashboard',
  description: 'Open a checkpoint or savepoint from the file browser in the State Explorer dashboard.',
  autoStart: true,
  requires: [IFileBrowserFactory],
  activate: (app, factory) => {
    const selected = () => {
      const browser = factory.tracker.currentWidget;
      if (!browser) {
        return null;
      }
      const first = browser.selectedItems().next();
      return first && !first.done ? first.value : null;
    };
    app.commands.addCommand(COMMAND, {
      label: 'Open in State Explorer',
      caption: 'Open this checkpoint, savepoint or checkpoint folder in the State Explorer dashboard (a new notebook)',
      isVisible: args => Boolean(args.path) || snapshotOf(selected()) !== null,
      execute: async args => {
        const snapshot = args.path !== undefined ? String(args.path) : snapshotOf(selected());
        if (snapshot === null) {
          return null;
        }
        // the notebook goes into the own folder of the user, named after the snapshot; never beside it
        const contents = app.serviceManager.contents;
        try {
          await contents.get(NOTEBOOKS, { content: false });
        } catch (err) {
          await contents.save(NOTEBOOKS, { type: 'directory' });
        }
        const kernelName = args.kernelName || 'python3';
        let path = `${NOTEBOOKS}/${notebookName(snapshot)}.ipynb`;
        for (let n = 2; ; n++) {
          try {
            await contents.get(path, { content: false });
          } catch (err) {
            break; // a free name
          }
          path = `${NOTEBOOKS}/${notebookName(snapshot)}-${n}.ipynb`;
        }
        await contents.save(path, {
          type: 'notebook',
          format: 'json',
          content: {
            cells: [{ cell_type: 'code', source: cellSource(snapshot), metadata: {}, outputs: [], execution_count: null }],
            metadata: { kernelspec: { name: kernelName, display_name: kernelName, language: 'python' } },
            nbformat: 4,
            nbformat_minor: 5
          }
        });
        const panel = await app.commands.execute('docmanager:open', {
          path,
          factory: 'Notebook',
          kernel: { name: kernelName }
        });
        await panel.context.ready;
        await panel.sessionContext.ready;
        app.shell.activateById(panel.id);
        await app.commands.execute('notebook:run-cell');
        panel.node.dataset.stateExplorerSnapshot = baseName(snapshot);
        return panel;
      }
    });
    app.contextMenu.addItem({ command: COMMAND, selector: '.jp-DirListing-item[data-isdir]', rank: 1 });
  }
};

export default plugin;
