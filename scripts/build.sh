#!/usr/bin/env bash
# Installs what is missing, then configures and builds muster in build/ (Ninja, RelWithDebInfo).
# Usage: scripts/build.sh [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
cmake --preset default >/dev/null
cmake --build build -j "$jobs" ${1:+--target "$@"}
