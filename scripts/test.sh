#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs every test (ctest; each test has a
# TIMEOUT). Extra arguments go to ctest, e.g. scripts/test.sh -L e2e
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
cd build
exec ctest --output-on-failure -j "$jobs" "$@"
