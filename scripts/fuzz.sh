#!/usr/bin/env bash
# Builds the fuzz targets with clang's libFuzzer (ASan + UBSan; the `fuzz` preset, in build-fuzz/)
# and runs each for SECONDS (default 30). Crashes are written to build-fuzz/fuzz-artifacts/ and
# make the script exit 1; replay one with `build-fuzz/bin/TARGET FILE`.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]      targets: rendezvous_fuzz launch_flags_fuzz
# FUZZ_SEED (default 1) makes a run repeatable; scripts/test.sh (CI) runs 20 s of each.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(rendezvous_fuzz launch_flags_fuzz)
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is missing (apt-get install clang)" >&2; exit 2; }
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
artifacts=build-fuzz/fuzz-artifacts
mkdir -p "$artifacts"
status=0
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$t
  mkdir -p "$corpus"
  echo "== $t for ${seconds}s" >&2
  if ! build-fuzz/bin/"$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -seed="${FUZZ_SEED:-1}" -artifact_prefix="$artifacts/$t-" -print_final_stats=1 \
       "$corpus" tests/fuzz/corpus/"$t" \
       2> "build-fuzz/$t.log"; then
    echo "fuzz.sh: $t found a failure; see build-fuzz/$t.log and $artifacts/" >&2
    tail -30 "build-fuzz/$t.log" >&2
    status=1
  else
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "build-fuzz/$t.log" >&2 || true
  fi
done
exit $status
