#!/usr/bin/env bash
# The .debs: CPack builds muster (programs, unit, config, docs) and muster-dev (headers, static
# libraries, CMake package) from this build. muster depends on Debian's runtime libraries only,
# carries no maintainer scripts (installs, enables and starts nothing), puts the unit in
# /lib/systemd/system and the config (a conffile) in /etc/muster; unpacked into a temporary
# root, its musterd answers --version and reads its config, its unit verifies and scores as the
# source one, its muster runs the demo (2 workers of the example trainer), and a worker run by a
# virtual environment's Python imports the packaged muster with no Debian package on its path.
# usage: deb_test.sh BUILD_DIR
source "$(dirname "$0")/lib.sh"
build=$1
for tool in cpack dpkg-deb dpkg-shlibdeps; do
  command -v $tool >/dev/null || skip "$tool not found (Debian packages cmake, dpkg-dev)"
done
scratch

step "cpack -G DEB"
(cd "$build" && cpack -G DEB -B "$SCRATCH/out" >"$SCRATCH/cpack.log" 2>&1) ||
  { cat "$SCRATCH/cpack.log"; fail "cpack failed"; }
deb=$(ls "$SCRATCH"/out/muster_*.deb)
dev=$(ls "$SCRATCH"/out/muster-dev_*.deb)
echo "built $(basename "$deb") ($(du -h "$deb" | cut -f1)), $(basename "$dev") ($(du -h "$dev" | cut -f1))"

step "control: name, runtime dependencies, no maintainer scripts, the conffile"
info=$(dpkg-deb -I "$deb")
field() { dpkg-deb -f "$deb" "$1"; }
[[ $(field Package) == muster ]] || fail "package name $(field Package)"
depends=$(field Depends)
echo "Depends: $depends"
for lib in libgrpc++1.51 libprotobuf32 libabsl20220623 libsystemd0 libc6; do
  grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib"
done
grep -q -- "-dev" <<<"$depends" && fail "Depends names a -dev package: $depends"
for script in preinst postinst prerm postrm; do
  grep -qw "$script" <<<"$info" && fail "the package has a $script script (it must enable nothing)"
done
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qx /etc/muster/musterd.conf ||
  fail "/etc/muster/musterd.conf is not a conffile"

step "contents"
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for path in ./usr/bin/muster ./usr/bin/musterd ./lib/systemd/system/musterd.service \
  ./etc/muster/musterd.conf ./usr/lib/muster/examples/train ./usr/share/doc/muster/deployment.md \
  ./usr/lib/muster/tls/libmuster-civetweb-libssl.so ./usr/lib/muster/tls/libmuster-civetweb-libcrypto.so; do
  grep -qxF "$path" <<<"$contents" || fail "muster lacks $path"
done
grep -q '^./usr/include/\|\.a$' <<<"$contents" && fail "muster carries development files"
# The Python package in a directory of its own (the launcher adds only it to a worker's path),
# and a .pth file that names it to Debian's python3; nothing else of muster in dist-packages.
for path in ./usr/lib/muster/python/muster/__init__.py ./usr/lib/muster/python/muster/torch.py \
  ./usr/lib/muster/python/muster/py.typed ./usr/lib/python3/dist-packages/muster.pth; do
  grep -qxF "$path" <<<"$contents" || fail "muster lacks $path"
done
grep -q '^./usr/lib/python3/dist-packages/muster/' <<<"$contents" &&
  fail "the Python package is still in Debian's dist-packages"
dev_contents=$(dpkg-deb -c "$dev" | awk '{print $6}')
for path in ./usr/lib/cmake/muster/musterConfig.cmake ./usr/lib/libmuster_comm.a \
  ./usr/include/muster/comm/communicator.h ./usr/include/muster/v1/rendezvous.pb.h; do
  grep -qxF "$path" <<<"$dev_contents" || fail "muster-dev lacks $path"
done
dev_depends=$(dpkg-deb -f "$dev" Depends)
echo "muster-dev Depends: $dev_depends"
grep -q "muster (= " <<<"$dev_depends" || fail "muster-dev does not depend on muster"
# Nothing under /etc/systemd: installing must not enable the unit.
grep -q '^./etc/systemd' <<<"$contents" && fail "the package enables something: $(grep '^./etc/systemd' <<<"$contents")"

step "unpacked into a temporary root"
root=$SCRATCH/root
dpkg-deb -x "$deb" "$root"
dpkg-deb -x "$dev" "$root"
"$root/usr/bin/musterd" --version | tee "$SCRATCH/version"
grep -q '^musterd [0-9]' "$SCRATCH/version" || fail "musterd --version"
"$root/usr/bin/muster" --version
unit=$root/lib/systemd/system/musterd.service
grep -q '^ExecStart=/usr/bin/musterd --config=/etc/muster/musterd.conf' "$unit" || fail "unit paths: $(grep ExecStart "$unit")"
if command -v systemd-analyze >/dev/null; then
  sed -e "s#/usr/bin/musterd#$root/usr/bin/musterd#" "$unit" > "$SCRATCH/musterd.service"
  out=$(systemd-analyze verify "$SCRATCH/musterd.service" 2>&1) || fail "verify: $out"
  [[ -z $out ]] || fail "verify: $out"
  systemd-analyze security --offline=true --threshold=20 "$unit" | tail -1
else
  echo "systemd-analyze not found: the packaged unit is not verified here"
fi

step "the packaged musterd with the packaged config"
setsid "$root/usr/bin/musterd" --config="$root/etc/muster/musterd.conf" --listen=127.0.0.1:0 \
  --port-file="$SCRATCH/port" >"$SCRATCH/musterd.log" 2>&1 &
PIDS+=($!)
wait_for_file "$SCRATCH/port" 20
kill -TERM "${PIDS[-1]}"
timeout 20 tail --pid="${PIDS[-1]}" -f /dev/null || fail "musterd did not stop on SIGTERM"
wait "${PIDS[-1]}" || fail "musterd exited $? after SIGTERM: $(cat "$SCRATCH/musterd.log")"

step "the packaged musterd serves HTTPS on --http-listen with its --tls-cert"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$SCRATCH/key.pem" -out "$SCRATCH/cert.pem" \
  >/dev/null 2>&1 || fail "openssl could not make a certificate"
setsid "$root/usr/bin/musterd" --config="$root/etc/muster/musterd.conf" --listen=127.0.0.1:0 \
  --http-listen=127.0.0.1:0 --tls-cert="$SCRATCH/cert.pem" --tls-key="$SCRATCH/key.pem" \
  >"$SCRATCH/musterd-https.log" 2>&1 &
PIDS+=($!)
deadline=$((SECONDS + 20))
until https_port=$(sed -n 's/.*on port \([0-9]*\) (HTTPS.*/\1/p' "$SCRATCH/musterd-https.log") &&
  [[ -n $https_port ]]; do
  ((SECONDS < deadline)) || { cat "$SCRATCH/musterd-https.log"; fail "musterd did not serve HTTPS"; }
  sleep 0.1
done
openssl s_client -connect "127.0.0.1:$https_port" -CAfile "$SCRATCH/cert.pem" -verify_return_error \
  </dev/null >"$SCRATCH/s_client.log" 2>&1 || { cat "$SCRATCH/s_client.log"; fail "the TLS handshake failed"; }
kill -TERM "${PIDS[-1]}"
timeout 20 tail --pid="${PIDS[-1]}" -f /dev/null || fail "musterd did not stop on SIGTERM"

step "the demo: muster --standalone --nproc-per-node=2 (the packaged example trainer)"
timeout 120 "$root/usr/bin/muster" --standalone --nproc-per-node=2 \
  "$root/usr/lib/muster/examples/train" --epochs=10 >"$SCRATCH/demo.log" 2>&1 ||
  { cat "$SCRATCH/demo.log"; fail "the demo failed"; }
grep '^rank [0-9]' "$SCRATCH/demo.log"  # torchrun's console: the workers' own lines
grep -q 'all 2 ranks agree' "$SCRATCH/demo.log" || { cat "$SCRATCH/demo.log"; fail "the ranks did not agree"; }
step "a virtual environment's worker imports muster, with no Debian package on its path"
if /usr/bin/python3 -m venv --without-pip "$SCRATCH/venv" >"$SCRATCH/venv-make.log" 2>&1; then
  cat >"$SCRATCH/venv_worker.py" <<'EOF'
import os, sys
import muster
from muster import _client
bad = [p for p in sys.path if "dist-packages" in p]
assert not bad, f"system package directories on the worker's path: {bad}"
store = _client.StoreClient.from_env(os.environ)
store.set("venv", b"ok")
print("venv worker: muster", muster.__version__, "from", muster.__file__,
      "store", store.get("venv", 10).decode(), "no dist-packages on sys.path")
EOF
  env -u PYTHONPATH -u PYTHON_EXEC PATH="$SCRATCH/venv/bin:$PATH" VIRTUAL_ENV="$SCRATCH/venv" \
    timeout 60 "$root/usr/bin/muster" --standalone --nproc-per-node=1 "$SCRATCH/venv_worker.py" \
    >"$SCRATCH/venv.log" 2>&1 || { cat "$SCRATCH/venv.log"; fail "the virtual environment's worker failed"; }
  grep -F "from $root/usr/lib/muster/python/muster/__init__.py store ok" "$SCRATCH/venv.log" ||
    { cat "$SCRATCH/venv.log"; fail "the worker did not import the packaged muster"; }
else
  echo "python3 -m venv failed (Debian package python3-venv): the venv worker is not run here"
  cat "$SCRATCH/venv-make.log"
fi
echo "deb: ok"
