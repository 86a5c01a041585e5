"""Apache Flink's State Processor API as a peer in the benchmarks (issues 31 and 32).

The peer programs are ours (``benchmarks/flink/spa/*.java``: ``SpaReadBench`` reads a snapshot's keyed state,
``SpaEditBench`` drops a key's state and writes a new savepoint); they run in a fresh JVM per measurement
against Flink 2.3's jars (``tools/flink/fetch_jars.sh``) and the State Processor API's jar, which the user gives
(``--spa-jar`` or ``FLINK_SPA_JAR``): it is published only on Maven Central. Without it a peer row is written
as not run, with the reason, never skipped silently.

The fixture jobs' classes (``tools/flink/src/StateFixtures.java``, ``ProductionFixtures.java``,
``ScaleSavepoints.java``) are compiled beside the peer programs, so the POJO and Kryo values of the
snapshots they made deserialize.

:func:`run_jvm` times a child JVM from the outside: wall seconds including the JVM's start (what a user
meets) and CPU seconds of the child, all threads, user and system (``getrusage(RUSAGE_CHILDREN)``), and returns
what the program printed as its last line (JSON).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
SPA_SOURCES = ROOT / "benchmarks" / "flink" / "spa"
JOB_SOURCES = [ROOT / "tools" / "flink" / "src" / name
               for name in ("StateFixtures.java", "Expect.java", "ProductionFixtures.java", "AsyncStateJob.java",
                             "ScaleSavepoints.java")]
BUILD_ROOT = ROOT / ".cache" / "flink" / "build"
FLINK_VERSION = "2.3.0"
ENV_VAR = "FLINK_SPA_JAR"
NOT_GIVEN = f"not run: SPA jar not given (--spa-jar or {ENV_VAR})"
#: what Flink's start scripts open for Kryo and java.time values (as tools/flink/make_fixtures.sh does)
JAVA_OPENS = [f"--add-opens={m}=ALL-UNNAMED" for m in (
    "java.base/java.util", "java.base/java.lang", "java.base/java.time", "java.base/java.math",
    "java.sql/java.sql", "java.base/java.lang.invoke", "java.base/java.net", "java.base/java.io",
    "java.base/java.nio")]


def spa_jar(given: Path | str | None) -> Path | None:
    """The State Processor API jar: ``given``, else ``$FLINK_SPA_JAR``, else None."""
    value = given if given else os.environ.get(ENV_VAR)
    return Path(value) if value else None


def classpath(jar: Path) -> str:
    """Flink's jars, the SPA jar and our peer programs with the fixture jobs compiled (cached by content)."""
    if not jar.is_file():
        raise FileNotFoundError(f"State Processor API jar {jar}: no such file")
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found on PATH: the State Processor API peer needs a JDK 17")
    flink = subprocess.run(["bash", str(ROOT / "tools" / "flink" / "fetch_jars.sh")], check=True,
                           capture_output=True, text=True,
                           env={**os.environ, "FLINK_VERSION": FLINK_VERSION}).stdout.strip()
    sources = sorted(SPA_SOURCES.glob("*.java")) + JOB_SOURCES
    digest = hashlib.sha256(str(jar.resolve()).encode() + str(jar.stat().st_size).encode())
    for src in sources:
        digest.update(src.read_bytes())
    build = BUILD_ROOT / f"spa-{digest.hexdigest()[:12]}"
    if not (build / ".complete").is_file():
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        subprocess.run(["javac", "-nowarn", "-proc:none", "-d", str(build), "-cp", f"{flink}:{jar}",
                        *map(str, sources)], check=True)
        (build / ".complete").touch()
    return f"{build}:{flink}:{jar}"


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_jvm(cp: str, main: str, args: list[str], heap: str = "3g", timeout_s: float = 3600) -> dict:
    """Runs ``main`` in a fresh JVM; its last stdout line (JSON) plus ``wall_seconds`` and ``cpu_seconds``."""
    cmd = ["java", f"-Xmx{heap}", "-XX:ActiveProcessorCount=2", *JAVA_OPENS, "-Dlog4j2.level=ERROR",
           "-cp", cp, main, *args]
    c0, t0 = _children_cpu(), time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if out.returncode != 0:
        tail = [line for line in out.stderr.splitlines() if "Exception" in line or "Error" in line][-3:]
        raise RuntimeError(f"{main} exited {out.returncode}: {' | '.join(tail) or out.stderr[-400:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got["wall_seconds"] = wall
    got["cpu_seconds"] = cpu
    return got


def metadata_dir(snapshot: Path) -> Path:
    """The folder holding ``_metadata``: the snapshot itself, or its one (newest) ``chk-N`` for a retained checkpoint."""
    if (snapshot / "_metadata").is_file():
        return snapshot
    chks = sorted((p for p in snapshot.glob("chk-*") if (p / "_metadata").is_file()),
                  key=lambda p: int(p.name.split("-", 1)[1]) if p.name.split("-", 1)[1].isdigit() else -1)
    if not chks:
        raise FileNotFoundError(f"{snapshot}: no _metadata, nor chk-*/_metadata")
    return chks[-1]


_SHARED = re.compile(rb"(/[\x21-\x7e]+?)/shared/[0-9a-f-]{36}")


@contextmanager
def where_written(snapshot: Path) -> Iterator[None]:
    """A moved incremental checkpoint made readable for Flink while the block runs.

    Flink's incremental checkpoints name their shared SST files by absolute path (the folder the job wrote
    to, here a temporary folder of tools/flink/make_fixtures.sh); the explorer resolves them inside the
    snapshot, Flink does not. When that folder no longer exists, a symbolic link from it to the snapshot
    stands in for it and is removed afterwards; nothing is created where something already is.
    """
    found = _SHARED.search((metadata_dir(snapshot) / "_metadata").read_bytes())
    original = Path(found.group(1).decode()) if found else None
    if original is None or original.exists() or original.resolve() == snapshot.resolve():
        yield
        return
    made = []
    parent = original.parent
    while not parent.exists():
        made.append(parent)
        parent = parent.parent
    original.parent.mkdir(parents=True, exist_ok=True)
    original.symlink_to(snapshot.resolve(), target_is_directory=True)
    try:
        yield
    finally:
        original.unlink()
        for folder in made:  # innermost first
            folder.rmdir()
