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
// when the browser lists them, at most CHECK_LIMIT per listing; a folder right-clicked before its check
// came back (or never checked: past CHECK_LIMIT, or found "no" before a checkpoint was written into it)
// is checked then, and the menu shows once that check has answered (a listing or a few, milliseconds).
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
// 'checkpoints': `chk-N` folders, one of which must hold a `_metadata` (checkpointChildren): the
//   checkpoint directory of a job, as Flink's `<job-id>` folder beside its `shared/` and `taskowned/`;
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

// The names of the `chk-N` folders of a listing, newest (highest N) first.
export function checkpointChildren(listing) {
  return listing
    .map(i => [i, /^chk-(\d+)$/.exec(i.name)])
    .filter(([i, m]) => i.type === 'directory' && m)
    .sort((a, b) => Number(b[1][1]) - Number(a[1][1]))
    .map(([i]) => i.name);
}

// The name of the newest `chk-N` folder of a listing, or null.
export function checkpointChild(listing) {
  const names = checkpointChildren(listing);
  return names.length ? names[0] : null;
}

// How many `chk-N` folders of a checkpoint directory are looked into, newest first, for one holding a
// `_metadata`. The explorer opens the newest complete one and passes over newer ones being written (a
// running Flink job's newest `chk-N` has no `_metadata` until that checkpoint completes; Flink retains
// one complete checkpoint by default): the newest alone would miss a running job's folder.
export const CHK_LOOKS = 5;

// Whether the folder at `path` opens in the explorer: one listing, and for a checkpoint directory one
// more per `chk-N` looked into (at most CHK_LOOKS, newest first, until one holds a `_metadata`).
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
  for (const name of checkpointChildren(listing).slice(0, CHK_LOOKS)) {
    let inside;
    try {
      inside = (await contents.get(`${path}/${name}`, { content: true })).content || [];
    } catch (err) {
      continue; // deleted by the job's retention since the listing
    }
    if (snapshotKind(inside) === 'snapshot') {
      return true;
    }
  }
  return false;
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
    const contents = app.serviceManager.contents;
    // path -> whether the folder opens in the explorer, once checked; path -> the check under way
    const opens = new Map();
    const checking = new Map();
    const checkFolder = path => {
      if (!checking.has(path)) {
        checking.set(path, opensInExplorer(contents, path)
          .catch(() => false)
          .then(ok => {
            opens.set(path, ok);
            checking.delete(path);
            return ok;
          }));
      }
      return checking.get(path);
    };
    const check = model => {
      let n = 0;
      for (const item of model.items()) {
        if (item.type !== 'directory' || opens.has(item.path) || checking.has(item.path)) {
          continue;
        }
        if (n++ >= CHECK_LIMIT) {
          break;
        }
        checkFolder(item.path);
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
    // A right click on a folder whose answer is not "yes" yet (its check still running, never started, or
    // "no" from before a checkpoint was written into it): the menu waits for a fresh check. This listener
    // runs before JupyterLab's own (the capture phase of the window); it holds the event back, checks, and
    // sends the same right click again, which JupyterLab then opens its menu for, with the answer known.
    const replayed = new WeakSet();
    window.addEventListener('contextmenu', event => {
      if (replayed.has(event) || event.shiftKey || !(event.target instanceof Element) ||
          !event.target.closest('.jp-DirListing-item[data-isdir]')) {
        return;
      }
      const item = selected();
      if (!item || item.type !== 'directory' || opens.get(item.path) === true) {
        return;
      }
      event.preventDefault();
      event.stopPropagation();
      const target = event.target;
      const init = {
        bubbles: true, cancelable: true, composed: true, button: event.button, buttons: event.buttons,
        clientX: event.clientX, clientY: event.clientY, screenX: event.screenX, screenY: event.screenY,
        ctrlKey: event.ctrlKey, altKey: event.altKey, metaKey: event.metaKey
      };
      if (!checking.has(item.path)) {
        opens.delete(item.path); // asked again: a "no" may be stale
      }
      const replay = () => {
        if (target.isConnected) {
          const again = new MouseEvent('contextmenu', init);
          replayed.add(again);
          target.dispatchEvent(again);
        }
      };
      checkFolder(item.path).then(replay, replay);
    }, true);
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
