#!/usr/bin/env bash
# The GPU check: on a fresh copy of the tree on a machine with an NVIDIA GPU, build with CUDA and
# NCCL, run the NCCL tests (comm_nccl_test; the in-place recovery path that shrinks NCCL with
# ncclCommShrink: comm_recover_process_test and the in_place e2e test), then the GPU allreduce
# benchmark (muster-nccl-bench: muster's NCCL backend against raw ncclAllReduce, bus bandwidth by
# size, 1 KB .. 256 MB), all within 8 minutes. Results: bench/results/gpu-check-<UTC date>.txt.
#
#   bash scripts/gpu-check.sh
#
# Environment: BUILD_DIR (default build-gpu), CUDA_HOME (default /usr/local/cuda), BUDGET_S
# (default 480: the whole run; each step gets what is left). Exits 2 at once, saying why, when
# there is no GPU (nvidia-smi missing or listing no device) or no CUDA/NCCL; 1 when a step fails
# (the results file says which); 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
budget=${BUDGET_S:-480}
build=${BUILD_DIR:-build-gpu}
cuda=${CUDA_HOME:-/usr/local/cuda}
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
out=bench/results/gpu-check-$stamp.txt

die() { echo "gpu-check: $*" >&2; exit 2; }
# 1. A GPU, CUDA and NCCL, before anything is built.
command -v nvidia-smi >/dev/null || die "no GPU here: nvidia-smi is not installed (no NVIDIA driver)"
gpus=$(timeout 30 nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>&1) ||
  die "no GPU here: nvidia-smi failed: $gpus"
[[ -n $gpus ]] || die "no GPU here: nvidia-smi lists no device"
ngpu=$(grep -c . <<<"$gpus")
[[ -x $cuda/bin/nvcc || -f $cuda/include/cuda_runtime.h ]] || die "no CUDA toolkit at $cuda (set CUDA_HOME)"
ls "$cuda"/lib*/libnccl.so* >/dev/null 2>&1 || die "no NCCL library under $cuda/lib*"

mkdir -p bench/results
exec > >(tee "$out") 2>&1
left() { echo $(( budget - ($(date +%s) - start) )); }
failed=()
# step NAME COMMAND...: runs within the time left; a failure is recorded, not fatal.
step() {
  local name=$1; shift
  local t=$(left)
  if (( t <= 5 )); then echo "== $name: SKIPPED (the ${budget}s budget is spent)"; failed+=("$name"); return; fi
  echo "== $name ($(date -u +%T), ${t}s left)"
  timeout --kill-after=10 "$t" "$@"
  local rc=$?
  (( rc == 0 )) || { echo "== $name: FAILED (exit $rc${rc/#124/, timed out})"; failed+=("$name"); }
  return 0
}

echo "# gpu-check $stamp on $(hostname): commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "# GPUs ($ngpu):"; sed 's/^/#   /' <<<"$gpus"
echo "# NCCL: $(ls "$cuda"/lib*/libnccl.so.* 2>/dev/null | head -1)"

# 2. Build only what the check runs.
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
# CMake prints "muster: NCCL backend ON" when it found CUDA and NCCL (CMakeLists.txt).
step configure cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCUDAToolkit_ROOT="$cuda" -DMUSTER_WITH_NCCL_IF_FOUND=ON
step build cmake --build "$build" -j"$(nproc)" --target muster muster-nccl-bench comm_nccl_test \
  comm_recover_process_test in_place_e2e_test
# 3. The NCCL tests, then the recovery path that shrinks NCCL in place.
step comm_nccl_test ctest --test-dir "$build" -R '^comm_nccl_test$' --output-on-failure
step recovery ctest --test-dir "$build" -R '^(comm_recover_process_test|in_place_e2e_test)$' \
  --output-on-failure
# 4. The benchmark: one rank per GPU (on one GPU busbw is 0 by definition; times still count).
step bench "$build/bin/muster" --standalone --nproc-per-node="$ngpu" --no-python \
  "$build/bin/muster-nccl-bench" 1024 $((256 << 20)) 20

echo "# done in $(( $(date +%s) - start ))s; failed: ${failed[*]:-none}; results: $out"
(( ${#failed[@]} == 0 ))
