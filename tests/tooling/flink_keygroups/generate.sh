#!/usr/bin/env bash
# Regenerate tests/data/flink_keygroup_vectors.json from Apache Flink itself:
# fetch Flink's jars (tools/flink/fetch_jars.sh, cached in .cache/flink/),
# compile KeyGroupVectors.java against them, run it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
HERE="$ROOT/tests/tooling/flink_keygroups"
CP="$("$ROOT/tools/flink/fetch_jars.sh")"
BUILD="$ROOT/.cache/flink/build/keygroups"
mkdir -p "$BUILD"
javac -nowarn -d "$BUILD" -cp "$CP" "$HERE/KeyGroupVectors.java"
java -cp "$BUILD:$CP" KeyGroupVectors > "$ROOT/tests/data/flink_keygroup_vectors.json.tmp"
mv "$ROOT/tests/data/flink_keygroup_vectors.json.tmp" "$ROOT/tests/data/flink_keygroup_vectors.json"
echo "wrote tests/data/flink_keygroup_vectors.json" >&2
