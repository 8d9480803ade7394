#!/usr/bin/env bash
# Builds muster with clang's thread-safety analysis as errors (the `tsa` preset, in build-tsa/):
# every ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED is checked, which g++ (the default build)
# ignores. Build only: nothing runs. scripts/test.sh (CI) runs it after ctest; MUSTER_TSA=0 skips.
#
#   bash scripts/tsa.sh [TARGET...]      default: everything the preset builds
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${MUSTER_TSA:-1} == 0 ]]; then
  echo "tsa.sh: thread-safety build skipped (MUSTER_TSA=0)"
  exit 0
fi
command -v clang++ >/dev/null || { echo "tsa.sh: clang++ is missing (apt-get install clang)" >&2; exit 2; }
jobs=$(nproc 2>/dev/null || echo 2)
started=$(date +%s)
echo "== tsa: clang -Wthread-safety -Werror build (build-tsa/)" >&2
cmake --preset tsa >/dev/null
if ! cmake --build build-tsa -j "$jobs" ${1:+--target "$@"}; then
  echo "tsa.sh: the thread-safety build FAILED: a lock the annotations promise is not held (or" \
    "another clang-only error); see the first error above. Reproduce: bash scripts/tsa.sh" >&2
  exit 1
fi
echo "tsa.sh: thread-safety build clean in $(($(date +%s) - started)) s" >&2
