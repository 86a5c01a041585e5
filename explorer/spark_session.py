"""A local SparkSession with the defaults State Explorer's Spark side needs.

::

    from explorer.spark import get_spark
    spark = get_spark()                       # local[2], RocksDB state store, 4 shuffle partitions
    spark = get_spark("spark://host:7077")    # a cluster: the way past one machine

Why each default (all measured or hit on this project with PySpark 4.3):

* ``local[2]``: the embedded default; pass ``master`` (or set ``SPARK_MASTER``)
  for ``local[*]`` or a cluster URL.
* ``spark.sql.shuffle.partitions = 4``: Spark's default of 200 makes small
  local jobs 5-6x slower and checkpoints ~20x larger. The number is frozen
  into a streaming checkpoint on its first run; it is Spark's
  "max parallelism" and what the explorer shows as key groups.
* RocksDB state store provider with changelog checkpointing: the
  ``transformWithState`` operators refuse any other provider, and changelog
  checkpointing writes only the changes of each micro-batch.
* ``PYSPARK_PYTHON = sys.executable``: Python workers must run the same
  interpreter (the venv with pandas, pyarrow and protobuf) as the driver.
* Arrow on, UTC session time zone, UI off, quiet logging.
* The JVM's own stdout/stderr (log4j's console output, Py4J's banner, the
  200+ ERROR lines a failed read prints) go to a log file, not the user's
  terminal or notebook: :func:`log_path` says where (``$EXPLORER_SPARK_LOG`` or
  ``<tmp>/state-explorer-spark-<pid>.log``). A progress bar shows while the
  JVM starts (6-12 s), on stderr in a terminal (also when it is not a TTY) and as a
  widget in a notebook.
* :func:`spark_progress` announces a slow read or analysis before it starts Spark
  jobs and keeps one line current with the running Spark stages and their tasks
  (Spark's status tracker, polled from a daemon thread); :func:`spark_stages` is that
  poll, which the dashboard's loading line uses too.

Errors raised by Spark are long chained Java traces whose first line (Py4J's
"An error occurred while calling o75.getResult.") says nothing;
:func:`root_cause` gives the innermost Java exception in one line.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator

from tqdm.auto import tqdm

from .errors import JobError

__all__ = ["DEFAULT_CONF", "DEFAULT_MASTER", "ROCKSDB_PROVIDER", "get_spark", "log_path", "root_cause", "spark_progress",
           "spark_stages", "stop_spark"]

DEFAULT_MASTER = "local[2]"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

#: Spark settings applied to every session :func:`get_spark` builds.
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    # Small local jobs: do not wait for locality, keep the driver's heap modest.
    "spark.locality.wait": "0s",
    "spark.sql.adaptive.enabled": "false",
    "spark.python.worker.reuse": "true",
}

#: Settings that can change on a running session (SQL confs); others need a new session.
_RUNTIME_PREFIXES = ("spark.sql.",)


def _python_env() -> None:
    """Make Spark's Python workers the interpreter running us (the venv)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # pyspark prints a JVM banner and warnings on stderr; keep the JVM's log4j quiet.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _check_deps() -> None:
    """Fail early with a clear message for the dependency pyspark does not declare."""
    try:
        import google.protobuf  # noqa: F401
    except ImportError as exc:  # pragma: no cover - environment specific
        raise JobError(
            "Spark's Python stateful operators (transformWithState*) need the 'protobuf' package, "
            "which pyspark does not declare; pip install 'protobuf>=5'"
        ) from exc


def get_spark(master: str | None = None, app_name: str = "state-explorer", log_level: str = "ERROR",
              **conf: Any):
    """The shared SparkSession, built on first call with :data:`DEFAULT_CONF`.

    ``master`` defaults to ``$SPARK_MASTER`` or ``local[2]``. Extra settings are given
    with their Spark names, e.g. ``get_spark(**{"spark.sql.shuffle.partitions": "8"})``.
    On an already running session, SQL settings (``spark.sql.*``) are applied to it; a
    different master or a non-SQL setting raises (stop the session first with
    :func:`stop_spark`).
    """
    _python_env()
    _check_deps()
    from pyspark.sql import SparkSession

    master = master or os.environ.get("SPARK_MASTER") or DEFAULT_MASTER
    settings = {**DEFAULT_CONF, **{k: str(v) for k, v in conf.items()}}
    settings["spark.pyspark.python"] = sys.executable
    settings["spark.pyspark.driver.python"] = sys.executable

    active = SparkSession.getActiveSession()
    if active is not None:
        running = active.sparkContext.master
        if running != master:
                raise JobError(
                f"a SparkSession with master {running!r} is already running, {master!r} was asked for; "
                "call explorer.spark.stop_spark() first"
            )
        for k, v in conf.items():
            if k.startswith(_RUNTIME_PREFIXES):
                active.conf.set(k, str(v))
            elif active.sparkContext.getConf().get(k, None) != str(v):
                        raise JobError(
                    f"Spark setting {k!r} cannot change on the running session (it is "
                    f"{active.sparkContext.getConf().get(k, None)!r}); call explorer.spark.stop_spark() first"
                )
        return active

    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    with tqdm(total=1, desc=f"starting Spark (JVM log: {log_path()})", bar_format="{desc} {elapsed}",
              disable=False, file=sys.stderr) as bar, _jvm_output_to(log_path()):
        spark = builder.getOrCreate()
        bar.update(1)
    spark.sparkContext.setLogLevel(log_level)
    return spark


def log_path() -> Path:
    """Where the JVM's stdout, stderr and log4j output go: ``$EXPLORER_SPARK_LOG`` or a file in the temp folder."""
    env = os.environ.get("EXPLORER_SPARK_LOG")
    return Path(env) if env else Path(tempfile.gettempdir()) / f"state-explorer-spark-{os.getpid()}.log"


@contextlib.contextmanager
def _jvm_output_to(path: Path) -> Iterator[None]:
    """While the JVM is launched, file descriptors 1 and 2 point at ``path``: the child keeps them."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = (os.dup(1), os.dup(2))
    except (OSError, ValueError, AttributeError):  # no real descriptors (some embedded consoles)
        yield
        return
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log, 1)
        os.dup2(log, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log):
            os.close(fd)


def root_cause(exc: BaseException) -> str:
    """The innermost Java exception behind a PySpark error, in one line (its class and message).

    Falls back to the error's first line when it did not come from the JVM.
    """
    seen: BaseException | None = exc
    while seen is not None:
        java = getattr(seen, "java_exception", None) or getattr(seen, "_origin", None)
        if java is not None:
            try:
                root = java
                for _ in range(50):
                    cause = root.getCause()
                    if cause is None or cause.equals(root):
                        break
                    root = cause
                text = str(root.toString()).strip().splitlines()
                if text:
                    return text[0][:500]
            except Exception:  # noqa: BLE001 - the gateway may be gone; use the text instead
                pass
        seen = seen.__cause__ or seen.__context__
    lines = str(exc).strip().splitlines()
    last = None
    for line in lines:  # PySpark's own errors put the JVM's root cause after "Caused by:"
        if line.strip().startswith("Caused by:"):
            last = line.strip()[len("Caused by:"):].strip()
    first = lines[0] if lines else type(exc).__name__
    return (last or first)[:500]


def stop_spark() -> None:
    """Stop the active SparkSession, if any."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


#: seconds between two polls of Spark's status tracker in :func:`spark_progress`
POLL_INTERVAL = 0.5


def _running_tracker() -> Any:
    """The status tracker of the running Spark session, or None (never starts Spark or imports it)."""
    if "pyspark.sql" not in sys.modules:
        return None
    from pyspark.sql import SparkSession

    session = SparkSession._instantiatedSession
    return None if session is None else session.sparkContext.statusTracker()


def spark_stages(tracker: Any = None) -> list[str]:
    """The active stages (``Spark stage 3 (toArrow): 5/8 tasks``) of ``tracker``, an object with
    Spark's ``StatusTracker`` methods ``getActiveStageIds()`` and ``getStageInfo(id)`` (default: the
    running session's); empty when no session runs. Spark's status is a nicety: errors give ``[]``."""
    try:
        tracker = _running_tracker() if tracker is None else tracker
        if tracker is None:
            return []
        out = []
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is not None:
                out.append(f"Spark stage {sid} ({info.name.split(' at ')[0]}): "
                           f"{info.numCompletedTasks}/{info.numTasks} tasks")
        return out
    except Exception:  # noqa: BLE001 - the read itself reports its errors
        return []


@contextlib.contextmanager
def spark_progress(label: str, *, tracker: Any = None, file: Any = None,
                   interval: float = POLL_INTERVAL) -> Iterator[Any]:
    """Announce ``label`` at once and, while the block runs, show Spark's running stages after it.

    A tqdm line (stderr in a terminal, also when not a TTY, or ``file``; a widget in a notebook):
    ``reading ... 12s Spark stage 3 (toArrow): 5/8 tasks``, updated when the stages change.
    ``tracker`` is read as by :func:`spark_stages`. The bar carries ``spark_progress = True`` so a
    view that polls the stages itself (the dashboard's loading line) shows only its label.
    """
    bar = tqdm(total=1, desc=label, bar_format="{desc} {elapsed}{postfix}", disable=False,
               file=sys.stderr if file is None else file)
    bar.spark_progress = True
    stop = threading.Event()

    def poll() -> None:
        shown: list[str] = []
        while True:
            stages = spark_stages(tracker)
            if stages and stages != shown:
                shown = stages
                bar.set_postfix_str(" · ".join(stages))
            if stop.wait(interval):
                return

    thread = threading.Thread(target=poll, name="state-explorer-spark-progress", daemon=True)
    thread.start()
    try:
        yield bar
    finally:
        stop.set()
        thread.join(timeout=2 * interval)
        bar.update(1)
        bar.close()
