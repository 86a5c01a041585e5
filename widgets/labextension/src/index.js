// A JupyterLab file-browser command: "Open in State Explorer" on a folder (a checkpoint,
// a savepoint or a checkpoint directory) or on a `_metadata` file. It makes a new notebook named
// after the snapshot in a `state-explorer/` folder of the user at the root of the server (never in
// or beside the snapshot: that folder was written by someone else, and a kernel imports from its
// working folder first), writes `widgets.explore("<snapshot>")` into its first cell behind a prelude that
// takes the working folder off sys.path (explorer/ipython.py: notebook_cell, the same text), and
// runs it, so the dashboard opens in that notebook.
//
// The command is offered only on what the explorer opens, checked before the menu shows from the
// file browser's own listings (the contents API, no kernel): a `_metadata` file, and a folder whose
// listing has what the explorer's readers' `detect` look for (snapshotKind below). Folders are checked
// when the browser lists them, at most CHECK_LIMIT per listing; one not checked yet gets no entry.
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

// What a folder holds, from its listing ([{name, type}]), as the explorer's readers detect it:
// 'snapshot': a `_metadata` file (an engine checkpoint or savepoint, a Flink savepoint or checkpoint:
//   explorer/readers/engine.py, explorer/readers/flink/reader.py);
// 'spark': a `metadata` file with `offsets/` and `commits/` folders (explorer/readers/spark/reader.py);
// 'checkpoints': `chk-N` folders, of which the newest must hold a `_metadata` (checkpointChild);
// null: nothing the explorer opens.
export function snapshotKind(listing) {
  const has = (name, type) => listing.some(i => i.name === name && i.type === type);
  if (has('_metadata', 'file')) {
    return 'snapshot';
  }
  if (has('metadata', 'file') && has('offsets', 'directory') && has('commits', 'directory')) {
    return 'spark';
  }
  return checkpointChild(listing) === null ? null : 'checkpoints';
}

// The name of the newest `chk-N` folder of a listing, or null.
export function checkpointChild(listing) {
  let best = null;
  let bestN = -1;
  for (const i of listing) {
    const m = /^chk-(\d+)$/.exec(i.name);
    if (i.type === 'directory' && m && Number(m[1]) > bestN) {
      best = i.name;
      bestN = Number(m[1]);
    }
  }
  return best;
}

// Whether the folder at `path` opens in the explorer: one listing, two for a checkpoint directory.
// A folder named `checkpoints` (what Flink jobs and the engine's demo call their checkpoint directory)
// cannot be listed through the contents API: the server routes `<path>/checkpoints` to its own file
// checkpoints. It is offered unchecked, and the dashboard says so if it does not open.
export async function opensInExplorer(contents, path) {
  if (baseName(path) === 'checkpoints') {
    return true;
  }
  const listing = (await contents.get(path, { content: true })).content || [];
  const kind = snapshotKind(listing);
  if (kind !== 'checkpoints') {
    return kind !== null;
  }
  const newest = (await contents.get(`${path}/${checkpointChild(listing)}`, { content: true })).content || [];
  return snapshotKind(newest) === 'snapshot';
}

// At most this many folders of one listing are checked.
export const CHECK_LIMIT = 200;

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
    // path -> whether the folder opens in the explorer (checked when a file browser lists it)
    const opens = new Map();
    const check = model => {
      let n = 0;
      for (const item of model.items()) {
        if (item.type !== 'directory' || opens.has(item.path) || n++ >= CHECK_LIMIT) {
          continue;
        }
        opens.set(item.path, false);
        opensInExplorer(app.serviceManager.contents, item.path).then(
          ok => opens.set(item.path, ok),
          () => opens.set(item.path, false)
        );
      }
    };
    const watch = browser => {
      browser.model.refreshed.connect(check);
      check(browser.model);
    };
    factory.tracker.forEach(watch);
    factory.tracker.widgetAdded.connect((_, browser) => watch(browser));
    const offered = item => {
      if (!item) {
        return false;
      }
      return item.type === 'directory' ? opens.get(item.path) === true : snapshotOf(item) !== null;
    };
    app.commands.addCommand(COMMAND, {
      label: 'Open in State Explorer',
      caption: 'Open this checkpoint, savepoint or checkpoint folder in the State Explorer dashboard (a new notebook)',
      isVisible: args => Boolean(args.path) || offered(selected()),
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
