#!/usr/bin/env bash
# Builds muster with clang's thread-safety analysis as errors (the `tsa` preset, in build-tsa/):
# every ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED is checked, which g++ (the default build)
# ignores. Build only: nothing runs. scripts/test.sh (CI) runs it after ctest.
#
#   bash scripts/tsa.sh [TARGET...]
# MUSTER_TSA=0 skips it; MUSTER_TSA=all builds the tests too. By default the libraries and
# binaries only: cold, the tests would more than double its time on CI's 2 cores
# (docs/architecture.md, "Locking").
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${MUSTER_TSA:-1}
if [[ $mode == 0 ]]; then
  echo "tsa.sh: thread-safety build skipped (MUSTER_TSA=0)"
  exit 0
fi
command -v clang++ >/dev/null || { echo "tsa.sh: clang++ is missing (apt-get install clang)" >&2; exit 2; }
tests=OFF
what="libraries and binaries; MUSTER_TSA=all adds the tests"
if [[ $mode == all ]]; then
  tests=ON
  what="libraries, binaries and tests"
fi
jobs=$(nproc 2>/dev/null || echo 2)
started=$(date +%s)
echo "== tsa: clang -Wthread-safety -Werror build of the ${what} (build-tsa/)" >&2
cmake --preset tsa -DMUSTER_BUILD_TESTS="$tests" >/dev/null
if ! cmake --build build-tsa -j "$jobs" ${1:+--target "$@"}; then
  echo "tsa.sh: the thread-safety build FAILED: a lock the annotations promise is not held (or" \
    "another clang-only error); see the first error above. Reproduce: bash scripts/tsa.sh" >&2
  exit 1
fi
echo "tsa.sh: thread-safety build clean in $(($(date +%s) - started)) s (${what})" >&2
