#!/usr/bin/env bash
# Restore savepoints into real Apache Flink (tools/flink/src/RestoreCheck.java) and print every keyed state
# entry the restored jobs hold, as "STATE <label> {json}" lines (issue 32).
#
#   tools/flink/restore_check.sh LABEL=SAVEPOINT,BACKEND,USER_UID,WINDOWS_UID [...]
#
# Needs Java 17 (java, javac); Flink's jars from the apache-flink-libraries wheel (fetch_jars.sh, cached in
# .cache/flink/). The classes are compiled once per source change into .cache/flink/build/restore-check-*.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VERSION="${FLINK_VERSION:-2.3.0}"
CP="$(FLINK_VERSION="$VERSION" "$ROOT/tools/flink/fetch_jars.sh")"
SRC=("$ROOT/tools/flink/src/Expect.java" "$ROOT/tools/flink/src/ProductionFixtures.java" "$ROOT/tools/flink/src/RestoreCheck.java")
HASH="$(cat "${SRC[@]}" "$ROOT/tools/flink/src/stats-v2/ProductionFixtures.java" | sha256sum | cut -c1-12)"
BUILD="${FLINK_CACHE:-$ROOT/.cache/flink}/build/restore-check-$VERSION-$HASH"
if [ ! -f "$BUILD/.complete" ]; then
    mkdir -p "$BUILD"
    javac -nowarn -d "$BUILD" -cp "$CP" "${SRC[@]}" 2> >(grep -v '^Note:' >&2)
    # the next version of the Stats POJO, as a user jar (RestoreCheck's "+without:stats-v2" job version)
    mkdir -p "$BUILD/stats-v2"
    javac -nowarn -d "$BUILD/stats-v2" "$ROOT/tools/flink/src/stats-v2/ProductionFixtures.java"
    (cd "$BUILD/stats-v2" && jar cf "$BUILD/stats-v2.jar" 'ProductionFixtures$Stats.class')
    touch "$BUILD/.complete"
fi
exec java -Xmx"${JAVA_HEAP:-768m}" -XX:ActiveProcessorCount=2 -Dlog4j2.level=ERROR \
    --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED \
    -Drestorecheck.statsV2="$BUILD/stats-v2.jar" -cp "$BUILD:$CP" RestoreCheck "$@"
