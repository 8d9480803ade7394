#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs every test (ctest; each test has a
# TIMEOUT), then the fuzz targets with libFuzzer for a bounded time (scripts/fuzz.sh, clang;
# FUZZ_SECONDS, default 20 per target, 0 skips). Extra arguments go to ctest, e.g.
# scripts/test.sh -L e2e
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
(cd build && ctest --output-on-failure -j "$jobs" "$@")
fuzz_seconds=${FUZZ_SECONDS:-20}
if ((fuzz_seconds > 0)) && (($# == 0)); then
  bash scripts/fuzz.sh "$fuzz_seconds"
fi
