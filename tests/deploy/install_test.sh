#!/usr/bin/env bash
# `cmake --install BUILD --prefix OUT/root/usr`: the tree the consumer and the Job simulation use
# (a ctest fixture). Checks that everything is where docs/deployment.md says.
# usage: install_test.sh BUILD_DIR OUT_DIR
source "$(dirname "$0")/lib.sh"
build=$1 out=$2
rm -rf "$out/root"
mkdir -p "$out"
cmake --install "$build" --prefix "$out/root/usr" >"$out/install.log" 2>&1 ||
  { cat "$out/install.log"; fail "cmake --install failed"; }
prefix=$out/root/usr
for path in bin/muster bin/musterd lib/muster/examples/train lib/cmake/muster/musterConfig.cmake \
  lib/cmake/muster/musterConfigVersion.cmake lib/libmuster_comm.a include/muster/comm/communicator.h \
  include/muster/store/store.h include/muster/common/status.h include/muster/v1/rendezvous.pb.h \
  lib/systemd/system/musterd.service etc/muster/musterd.conf share/doc/muster/deployment.md; do
  [[ -e $prefix/$path ]] || fail "not installed: $path"
done
# The unit names the installed paths, not /usr/bin.
grep -q "^ExecStart=$prefix/bin/musterd --config=$prefix/etc/muster/musterd.conf" \
  "$prefix/lib/systemd/system/musterd.service" || fail "unit: $(grep ExecStart "$prefix/lib/systemd/system/musterd.service")"
# Public headers only: nothing of the private directories (muster/store/ is the store module's
# public headers; comm's private store/ folder would be muster/comm/store/).
if find "$prefix/include" -name '*.h' | grep -vE "^$prefix/include/muster/store/[^/]+\.h$" |
  grep -E '/(gloo|store|src|posix)/'; then fail "private headers installed"; fi
echo "installed $(find "$prefix" -type f | wc -l) files under $prefix"
