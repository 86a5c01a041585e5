#!/usr/bin/env bash
# Fetch Apache Flink's jars from the apache-flink-libraries wheel on PyPI into a
# gitignored cache, without installing anything into any Python environment.
#
#   tools/flink/fetch_jars.sh            -> prints the classpath (lib/*.jar)
#   FLINK_VERSION=2.3.0 (default)        -> which wheel to use
#
# The wheel is only downloaded (pip download --no-deps) and unzipped; its
# Python dependencies (which conflict with pyspark 4) are never installed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FLINK_VERSION="${FLINK_VERSION:-2.3.0}"
CACHE="${FLINK_CACHE:-$ROOT/.cache/flink}"
DEST="$CACHE/$FLINK_VERSION"
PY="${PYTHON:-python3}"

if [ ! -f "$DEST/.complete" ]; then
    mkdir -p "$DEST/dl"
    rm -rf "$DEST/lib" "$DEST/unpacked"
    mkdir -p "$DEST/unpacked"
    # Flink 2.2+ ships a wheel (jars in pyflink/lib); older releases only an sdist (jars in deps/lib)
    if "$PY" -m pip download --quiet --no-deps --only-binary=:all: \
            "apache-flink-libraries==$FLINK_VERSION" -d "$DEST/dl" >&2 2>/dev/null; then
        WHEEL="$(ls "$DEST"/dl/apache_flink_libraries-"$FLINK_VERSION"-*.whl | head -1)"
        (cd "$DEST/unpacked" && unzip -q -o "$WHEEL" 'pyflink/lib/*')
        mv "$DEST/unpacked/pyflink/lib" "$DEST/lib"
    else
        "$PY" -m pip download --quiet --no-deps --no-binary=:all: \
            "apache-flink-libraries==$FLINK_VERSION" -d "$DEST/dl" >&2
        SDIST="$(ls "$DEST"/dl/apache[-_]flink[-_]libraries-"$FLINK_VERSION".tar.gz | head -1)"
        tar -xzf "$SDIST" -C "$DEST/unpacked" --wildcards '*/deps/lib/*.jar'
        mv "$DEST"/unpacked/*/deps/lib "$DEST/lib"
    fi
    rm -rf "$DEST/unpacked" "$DEST/dl"
    touch "$DEST/.complete"
fi

# classpath: every jar in lib/ (flink-dist carries the RocksDB backend)
ls "$DEST"/lib/*.jar | tr '\n' ':' | sed 's/:$//'
echo
