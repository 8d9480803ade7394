#!/usr/bin/env bash
# Installs every Debian 12 package muster's build, tests and benchmarks need.
# Idempotent: packages already present are skipped, and apt-get runs only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev openssl
  libabsl-dev libgloo-dev libcli11-dev nlohmann-json3-dev libsystemd-dev libcivetweb-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-torch
  # python/ (import muster.torch needs nothing else): its tests, its type check, and the test of
  # a worker in a virtual environment (python3 -m venv)
  python3-pytest mypy python3-venv
  iproute2 iptables procps psmisc hyperfine
  gnuplot-nox
  # scripts/fuzz.sh: clang with libFuzzer and the sanitizer runtimes
  clang libclang-rt-14-dev
  # tests/deploy: systemd-analyze (the unit), dpkg-shlibdeps (the .deb), PyYAML (the Job simulation)
  systemd dpkg-dev python3-yaml
  # musterd replicas (issue 25): etcd members started by the tests, the v3 API protos for the client
  etcd-server etcd-client golang-etcd-server-dev
  # muster stacks and the hang report (issue 28): libdwfl reads the workers' native stacks
  libdw-dev
  # the Windows MSI (deploy/msi/build-msi.sh, issue 40): wixl, and msibuild/msiinfo from
  # msitools (the rest of the Windows cross-build's packages: scripts/build-windows.sh)
  wixl msitools
  # the console's browser test (tests/console) and bench/console.sh: headless chromium, driven by
  # puppeteer-core from npm (which downloads no browser of its own)
  chromium
)
# tests/deploy validates the Kubernetes manifests with node and npm packages; a machine that has
# node from elsewhere keeps it (kubectl is not in Debian 12 in a version recent enough: without
# it those tests say so and skip).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
