#!/usr/bin/env bash
# A worker project outside the tree (tests/deploy/consumer) configures with find_package(muster)
# against the installed package (the deploy_install fixture), builds, and runs under the
# installed launcher: 2 ranks all-reduce through libmuster_comm.
# usage: consumer_test.sh SOURCE_DIR OUT_DIR
source "$(dirname "$0")/lib.sh"
src=$1 out=$2
prefix=$out/root/usr
[[ -f $prefix/lib/cmake/muster/musterConfig.cmake ]] || fail "no installed package under $prefix (the deploy_install test)"
scratch
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
step "configure with find_package(muster) (CMAKE_PREFIX_PATH=$prefix)"
cmake -S "$src/tests/deploy/consumer" -B "$SCRATCH/build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$SCRATCH/configure.log" 2>&1 ||
  { cat "$SCRATCH/configure.log"; fail "configure failed"; }
grep "muster launcher" "$SCRATCH/configure.log"
step "build"
cmake --build "$SCRATCH/build" >"$SCRATCH/build.log" 2>&1 || { cat "$SCRATCH/build.log"; fail "build failed"; }
step "run under the installed launcher"
timeout 120 "$prefix/bin/muster" --standalone --nproc-per-node=2 "$SCRATCH/build/consumer" \
  >"$SCRATCH/run.log" 2>&1 || { cat "$SCRATCH/run.log"; fail "the consumer failed"; }
grep 'consumer rank' "$SCRATCH/run.log"
[[ $(grep -c 'consumer rank .* ok$' "$SCRATCH/run.log") == 2 ]] || { cat "$SCRATCH/run.log"; fail "not both ranks ok"; }
echo "consumer: ok"
