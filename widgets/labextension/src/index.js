// A JupyterLab file-browser command: "Open in State Explorer" on a folder (a checkpoint,
// a savepoint or a checkpoint directory) or on a `_metadata` file. It makes a new notebook
// beside the snapshot (never inside it), writes `widgets.explore("<snapshot>")` into its first
// cell and runs it, so the dashboard opens in that notebook.
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

// The code of the notebook's first cell, run in a kernel whose working directory is `folder`.
export function cellSource(snapshot, folder) {
  const rel = folder === '' ? snapshot : snapshot.slice(folder.length + 1);
  return `import widgets\n\nwidgets.explore(${JSON.stringify(rel || '.')})`;
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
        // the notebook goes beside the snapshot folder, so nothing is written into the snapshot
        const folder = snapshot === '' ? '' : parentOf(snapshot);
        const panel = await app.commands.execute('notebook:create-new', {
          cwd: folder,
          kernelName: args.kernelName || 'python3'
        });
        await panel.context.ready;
        panel.content.widgets[0].model.sharedModel.setSource(cellSource(snapshot, folder));
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
