#!/usr/bin/env bash
# Regenerate the Apache Flink fixtures under sample_data/flink/ from real Flink jobs.
#
#   tools/flink/make_fixtures.sh                  # the committed fixtures (small)
#   tools/flink/make_fixtures.sh --bench DIR      # bigger snapshots for benchmarks/ into DIR
#   ONLY="types-heap-checkpoint sql-heap-canonical-savepoint" tools/flink/make_fixtures.sh   # just these folders
#
# Needs Java 17 (java, javac). Flink's jars come from the apache-flink-libraries
# wheel on PyPI (tools/flink/fetch_jars.sh, cached in .cache/flink/). Each
# snapshot runs StateFixtures.java on a local mini cluster and writes
# <out>/<name>/ (the snapshot files) plus <out>/<name>/EXPECTED.json.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

use_flink() { # version: fetch its jars and compile the job against them
    CP="$(FLINK_VERSION="$1" "$ROOT/tools/flink/fetch_jars.sh")"
    BUILD="$ROOT/.cache/flink/build/fixtures-$1"
    mkdir -p "$BUILD"
    javac -nowarn -d "$BUILD" -cp "$CP" "$ROOT/tools/flink/src/StateFixtures.java"
}
use_flink "${FLINK_VERSION:-2.3.0}"

# Production-style jobs (issue 15): tools/flink/src/ProductionFixtures.java, one folder each, EXPECTED.json with
# every state entry (schema: tools/flink/README.md). Kryo and java.time values need the JDK's modules opened,
# as Flink's own start scripts do.
JAVA_OPENS="--add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED
 --add-opens=java.base/java.time=ALL-UNNAMED --add-opens=java.base/java.math=ALL-UNNAMED
 --add-opens=java.sql/java.sql=ALL-UNNAMED --add-opens=java.base/java.lang.invoke=ALL-UNNAMED
 --add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED
 --add-opens=java.base/java.nio=ALL-UNNAMED"
use_prod() { # version: compile the production-style jobs against that release
    PCP="$(FLINK_VERSION="$1" "$ROOT/tools/flink/fetch_jars.sh")"
    PBUILD="$ROOT/.cache/flink/build/production-$1"
    mkdir -p "$PBUILD"
    local extra=()   # the async state API (State V2) exists from Flink 2.0 on
    [[ "$1" == 1.* ]] || extra=("$ROOT/tools/flink/src/AsyncStateJob.java")
    javac -nowarn -d "$PBUILD" -cp "$PCP" "$ROOT/tools/flink/src/Expect.java" "$ROOT/tools/flink/src/ProductionFixtures.java" \
        "${extra[@]}"
}
prod() { # name job backend mode [-Dfixtures.changelog=true|-Dfixtures.filemerging=true]
    local name="$1" job="$2" backend="$3" mode="$4"
    shift 4
    wanted "$name" || return 0
    echo "== $name" >&2
    # shellcheck disable=SC2086
    java -Xmx"${JAVA_HEAP:-1g}" -XX:ActiveProcessorCount=2 $JAVA_OPENS -Dlog4j2.level=ERROR "$@" \
        -cp "$PBUILD:$PCP" ProductionFixtures "$OUT" "$name" "$job" "$backend" "$mode" >&2
}

wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
run() { # name backend mode events keys [compress]
    wanted "$1" || return 0
    echo "== $1" >&2
    java -Xmx"${JAVA_HEAP:-1g}" -XX:ActiveProcessorCount=2 -Dlog4j2.level=ERROR \
        -Dfixtures.checkpoint.ms="${CHECKPOINT_MS:-300}" -Dfixtures.max.parallelism="${MAX_PARALLELISM:-128}" -cp "$BUILD:$CP" StateFixtures "$OUT" "$@" >&2
}

if [ "${1:-}" = "--bench" ]; then
    OUT="${2:-$ROOT/.cache/flink/bench}"
    EVENTS="${BENCH_EVENTS:-2000000}"
    KEYS="${BENCH_KEYS:-1000000}"
    mkdir -p "$OUT"
    export JAVA_HEAP="${JAVA_HEAP:-4g}" CHECKPOINT_MS="${CHECKPOINT_MS:-3000}"
    run bench-heap-canonical-savepoint hashmap canonical "$EVENTS" "$KEYS"
    # RocksDB does ~15 reads/writes per event here (timers live in RocksDB too): fewer events
    run bench-rocksdb-incremental-checkpoint rocksdb incremental \
        "${BENCH_ROCKSDB_EVENTS:-$((EVENTS / 4))}" "${BENCH_ROCKSDB_KEYS:-$((KEYS / 4))}"
    # value-heavy: the production "types" job (POJOs with nested collections, Rows, Kryo, java.time, Avro-free)
    # on many users; its classes as a jar, for the Kryo values (explorer.open(..., jars=[...]))
    use_prod 2.3.0
    JAVA_HEAP="${BENCH_TYPES_HEAP:-3g}" prod bench-types-heap-canonical-savepoint types hashmap canonical \
        -Dfixtures.events="${BENCH_TYPES_EVENTS:-150000}" -Dfixtures.users="${BENCH_TYPES_USERS:-40000}" \
        -Dfixtures.noentries=true
    jar cf "$OUT/bench-types-job.jar" -C "$PBUILD" .   # (outside the snapshot: not counted as its bytes)
    exit 0
fi

OUT="$ROOT/sample_data/flink"
mkdir -p "$OUT"
EVENTS=20000
KEYS=500
run heap-canonical-savepoint hashmap canonical $EVENTS $KEYS
run heap-native-savepoint hashmap native $EVENTS $KEYS
run heap-checkpoint-compressed hashmap checkpoint $EVENTS $KEYS compress
run rocksdb-canonical-savepoint-compressed rocksdb canonical $EVENTS $KEYS compress
run rocksdb-native-savepoint rocksdb native $EVENTS $KEYS
run rocksdb-incremental-checkpoint rocksdb incremental $EVENTS $KEYS
run sql-groupby-savepoint hashmap sql $EVENTS $KEYS
# an unaligned checkpoint taken under back-pressure: records in flight, state cut mid-stream
CHECKPOINT_MS=500 run heap-unaligned-checkpoint hashmap unaligned $EVENTS $KEYS
# max parallelism above 128: keys carry a 2-byte key-group prefix (1000: not a power of two)
MAX_PARALLELISM=1000 run maxp1000-heap-canonical-savepoint hashmap canonical $EVENTS $KEYS
MAX_PARALLELISM=1000 run maxp1000-rocksdb-native-savepoint rocksdb native $EVENTS $KEYS
# an older release too: Flink 1.20 writes an older _metadata version
use_flink 1.20.3
run flink-1.20-heap-canonical-savepoint hashmap canonical $EVENTS $KEYS
run flink-1.20-rocksdb-incremental-checkpoint rocksdb incremental $EVENTS $KEYS

# --- production-style fixtures (issue 15) ---------------------------------------------------------------
# in a folder of their own: tests/readers parametrizes over every sample_data/flink/*/EXPECTED.json in
# StateFixtures' format
OUT="$ROOT/sample_data/flink/production"
mkdir -p "$OUT"
use_prod 2.3.0
prod types-heap-canonical-savepoint types hashmap canonical
prod types-heap-checkpoint types hashmap checkpoint            # full heap format: values not length-prefixed
prod types-rocksdb-native-savepoint types rocksdb native
prod windows-heap-canonical-savepoint windows hashmap canonical
prod windows-rocksdb-incremental-checkpoint windows rocksdb incremental
prod joins-heap-canonical-savepoint joins hashmap canonical
prod joins-rocksdb-native-savepoint joins rocksdb native
prod sql-heap-canonical-savepoint sql hashmap canonical
prod plain-rocksdb-canonical-savepoint plain rocksdb canonical
prod plain-rocksdb-incremental-checkpoint plain rocksdb incremental
prod plain-changelog-heap-checkpoint plain hashmap checkpoint -Dfixtures.changelog=true   # all in the changelog
prod types-changelog-heap-checkpoint types hashmap checkpoint -Dfixtures.changelog=true    # Kryo etc. in the changelog
prod plain-changelog-materialized-rocksdb-checkpoint plain rocksdb checkpoint -Dfixtures.changelog=true \
    -Dfixtures.materialize="200 ms"                                                          # materialized + changelog
prod plain-filemerging-rocksdb-incremental-checkpoint plain rocksdb incremental -Dfixtures.filemerging=true
prod plain-forst-native-savepoint plain forst native
prod plain-forst-checkpoint plain forst checkpoint
# issue 33: SQL accumulators of every field kind (COUNT DISTINCT's MapView, LAST_VALUE's nested row) on RocksDB
prod sqlagg-heap-canonical-savepoint sqlagg hashmap canonical
prod sqlagg-rocksdb-incremental-checkpoint sqlagg rocksdb incremental
prod sqlagg-rocksdb-native-savepoint sqlagg rocksdb native
# issue 33: COUNT(DISTINCT) as real jobs run it (INT/BIGINT/FILTERed/nullable distinct columns; mini-batch
# two-phase with state TTL; distinct-agg split; retracting input; a window TVF; a legacy group window; DECIMAL/TIMESTAMP_LTZ/DOUBLE/BOOLEAN/DATE
# columns), each on RocksDB incremental and native
for v in plain minibatch split retract window groupwindow types; do
    n="sqldistinct-$v"; [ "$v" = plain ] && n=sqldistinct
    prod "$n-rocksdb-incremental-checkpoint" sqldistinct rocksdb incremental -Dfixtures.sqlvariant="$v"
    prod "$n-rocksdb-native-savepoint" sqldistinct rocksdb native -Dfixtures.sqlvariant="$v"
done
# the same COUNT(DISTINCT) query on ForSt with table.exec.async-state.enabled=true (a 2.x SQL job's async state option)
prod sqldistinct-async-forst-checkpoint sqldistinct forst checkpoint -Dfixtures.sqlvariant=plain -Dfixtures.asyncsql=true
# issue 33: session windows whose merges make the state window differ from the session (out-of-order events bridging
# and extending sessions, allowed lateness, late and dropped elements, cleanup), on process, aggregate, evictor and
# dynamic-gap operators: tools/flink/src/SessionWindows.java
for s in "sessions-heap-canonical-savepoint hashmap canonical" "sessions-rocksdb-incremental-checkpoint rocksdb incremental"; do
    set -- $s
    if wanted "$1"; then
        echo "== $1" >&2
        javac -nowarn -d "$PBUILD" -cp "$PCP" "$ROOT/tools/flink/src/SessionWindows.java"
        java -Xmx"${JAVA_HEAP:-1g}" -XX:ActiveProcessorCount=2 $JAVA_OPENS -Dlog4j2.level=ERROR -cp "$PBUILD:$PCP" SessionWindows \
            "$OUT" "$1" "$2" "$3" >&2
    fi
done
# the async state API (State V2) on ForSt (its backend; the HashMap backend fails this job in 2.3.0)
prod asyncstate-forst-checkpoint asyncstate forst checkpoint
prod asyncstate-forst-native-savepoint asyncstate forst native
# issue 33: a source's split state mid-run (NumberSequenceSource at parallelism 2), tools/flink/src/SourceSplits.java
if wanted source-splits-heap-canonical-savepoint; then
    echo "== source-splits-heap-canonical-savepoint" >&2
    javac -nowarn -d "$PBUILD" -cp "$PCP" "$ROOT/tools/flink/src/SourceSplits.java"
    java -Xmx"${JAVA_HEAP:-1g}" -XX:ActiveProcessorCount=2 -Dlog4j2.level=ERROR -cp "$PBUILD:$PCP" SourceSplits \
        "$OUT" source-splits-heap-canonical-savepoint >&2
fi
use_prod 1.20.3
prod flink-1.20-plain-heap-canonical-savepoint plain hashmap canonical
prod flink-1.20-types-heap-canonical-savepoint types hashmap canonical      # Kryo 2
prod flink-1.20-plain-filemerging-rocksdb-incremental-checkpoint plain rocksdb incremental -Dfixtures.filemerging=true
prod flink-1.20-sqlagg-rocksdb-incremental-checkpoint sqlagg rocksdb incremental
# issue 33: COUNT(DISTINCT) with TTL and mini-batch two-phase, and fed by retractions (ARRAY<BIGINT> views), on 1.20
prod flink-1.20-sqldistinct-minibatch-rocksdb-incremental-checkpoint sqldistinct rocksdb incremental -Dfixtures.sqlvariant=minibatch
prod flink-1.20-sqldistinct-retract-rocksdb-incremental-checkpoint sqldistinct rocksdb incremental -Dfixtures.sqlvariant=retract
# every release line in between: plain and every value type (Kryo 2). (1.16 and 1.15: the job does not compile
# against them yet: its CEP pattern uses SimpleCondition.of, new in Flink 1.17)
for v in 1.19.3 1.18.1; do
    use_prod "$v"
    prod "flink-${v%.*}-plain-heap-canonical-savepoint" plain hashmap canonical
    prod "flink-${v%.*}-types-heap-canonical-savepoint" types hashmap canonical
done
use_prod 1.17.2
prod flink-1.17-plain-heap-canonical-savepoint plain hashmap canonical
prod flink-1.17-types-heap-canonical-savepoint types hashmap canonical      # Kryo 2
prod flink-1.17-plain-rocksdb-incremental-checkpoint plain rocksdb incremental
# PyFlink (Row keys, values pickled by Python): apache-flink in a venv of its own under .cache/, never the project's
PYFLINK_VENV="${PYFLINK_VENV:-$ROOT/.cache/flink/pyflink-venv}"
if wanted pyflink-heap-canonical-savepoint; then
    if [ ! -x "$PYFLINK_VENV/bin/python" ]; then
        python3.11 -m venv "$PYFLINK_VENV"
        "$PYFLINK_VENV/bin/pip" install --quiet "apache-flink==2.3.0" >&2
    fi
    echo "== pyflink-heap-canonical-savepoint" >&2
    "$PYFLINK_VENV/bin/python" "$ROOT/tools/flink/pyflink_job.py" "$OUT" pyflink-heap-canonical-savepoint >&2
fi

du -sh "$ROOT"/sample_data/flink/* "$OUT"/* >&2
