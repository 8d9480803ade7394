#!/usr/bin/env bash
# Cross-builds muster for 64-bit Windows (x86_64-w64-mingw32) on Debian 12; the results run under
# wine64. See docs/windows.md.
#
#   bash scripts/build-windows.sh            # dependencies (once, cached), then muster
#   bash scripts/build-windows.sh --deps-only
#   bash scripts/build-windows.sh --test     # also run ctest in the build directory (under wine)
#   bash scripts/build-windows.sh --ci --test  # what scripts/test.sh runs (below)
#   bash scripts/build-windows.sh --subset --test  # the gRPC-free subset, whatever the cache holds
#
# With musterd.exe built, it then builds the MSI, build-windows/muster-<version>.msi
# (deploy/msi/build-msi.sh, with Debian's wixl); ctest's msi_wine_test installs, upgrades and
# uninstalls it under wine.
#
# --ci: when the dependency cache already holds every dependency (as on any machine that ran this
# script once), the same as without it: every Windows target and the whole suite. On a cold cache
# it falls back to the gRPC-free subset, says so loudly (before the build and again at the end),
# and still exits 0 when that subset passes: building re2, c-ares and gRPC would cost about 30 of
# the 40 minutes a cold cache costs, more than CI's budget leaves.
# --subset: builds only the dependencies of the gRPC-free tests (not re2, c-ares, gRPC) and muster
# without gRPC (the platform layer, Gloo's libuv transport and their tests); Gloo is left out,
# with a message, when its source is not there.
# Exit 3 (nothing built, nothing tested): the Debian mirror could not give a source package or the
# host packages; scripts/test.sh reports that as a skipped stage, while a failed build or test
# stays a failure.
#
# Debian ships no Windows builds of gRPC, protobuf, Abseil, c-ares, re2, OpenSSL, libuv, Gloo or
# civetweb, so the first run builds them from Debian's own source packages (the versions the Linux
# build uses), static and Release, into a cache outside the repository:
#   ${XDG_CACHE_HOME:-~/.cache}/muster/mingw-<hash of the versions, patches and compiler>
# Each dependency gets a stamp file there when it is installed, so an interrupted run resumes with
# the next one and a later run with nothing to do skips straight to muster.
#
# Environment:
#   MUSTER_WINDOWS_BUILD_DIR   muster's build directory (default: <repo>/build-windows)
#   MUSTER_GLOO_SOURCE         Gloo's source: a directory or the gloo-5b143513.tar.gz tarball
#                              (default: ../shared/deps/gloo-5b143513.tar.gz beside the repository)
#   MUSTER_WINDOWS_JOBS        parallel compile jobs (default 2); all builds run under nice -n 19
#   MUSTER_WINDOWS_CACHE       the cache root (default ${XDG_CACHE_HOME:-~/.cache}/muster)
#   MUSTER_WINDOWS_CTEST_ARGS  extra ctest arguments for --test (e.g. -R win_ or -E bench)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=${MUSTER_WINDOWS_JOBS:-2}
NICE=(nice -n 19)
CACHE=${MUSTER_WINDOWS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/muster}
BUILD_DIR=${MUSTER_WINDOWS_BUILD_DIR:-$REPO/build-windows}
PATCHES=$REPO/scripts/windows/patches
TOOLCHAIN=$REPO/cmake/mingw-w64-x86_64.cmake
TRIPLE=x86_64-w64-mingw32

DEPS_ONLY=0
RUN_TESTS=0
CI_MODE=0
SUBSET=0
for arg in "$@"; do
  case $arg in
    --deps-only) DEPS_ONLY=1 ;;
    --test) RUN_TESTS=1 ;;
    --ci) CI_MODE=1 ;;
    --subset) SUBSET=1 ;;
    -h | --help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "build-windows: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "build-windows: $*" >&2; }
die() { echo "build-windows: error: $*" >&2; exit 1; }
# The mirror (not muster) failed us: exit 3, which scripts/test.sh reports as a skipped stage.
die_fetch() { echo "build-windows: error: $*" >&2; exit 3; }

# ---------------------------------------------------------------------------------------------
# Versions. Debian source packages, pinned to what Debian 12's -dev packages (the Linux build) are
# built from. OpenSSL is the exception: Debian's security archive keeps only the newest 3.0 upload
# and its .dsc/patches answer 404 there, so the newest 3.0 .orig tarball listed is used.
# ---------------------------------------------------------------------------------------------
declare -A SRC_VERSION=(
  [abseil]=20220623.1-1+deb12u2
  [protobuf]=3.21.12-3+deb12u1
  [grpc]=1.51.1-3
  [re2]=20220601+dfsg-1
  [c-ares]=1.18.1-3
  [libuv1]=1.44.2-1+deb12u1
  [googletest]=1.12.1-0.2
  [nlohmann-json3]=3.11.2-2
  [cli11]=2.1.2+ds-1
)
GLOO_TARBALL=gloo-5b143513.tar.gz
GLOO_SHA256=3fe4fc70e8c3e93d9100ca24c88456600422c1bf7a22065112692963108c0f88
# Bump when a recipe below changes in a way that changes the installed result.
RECIPE_REV=1
# Dependencies added after the cache key above was fixed: their version (and recipe revision) goes
# into their own stamp's fingerprint, not into KEY, so adding one (or bumping it) builds only it
# (and what needs it) in an existing cache instead of a fresh 40-minute prefix.
declare -A LATER_VERSION=(
  # civetweb (musterd's --http-listen): the version of Debian 12's libcivetweb-dev.
  [civetweb]="1.15+dfsg-4 recipe=1"
)
# Build order: each dependency's own dependencies come before it.
# The small ones first, so the tests that need no gRPC can run while gRPC (most of the time) builds.
DEPS=(abseil protobuf libuv1 gloo googletest nlohmann-json3 cli11 openssl re2 c-ares grpc civetweb)
# The subset: what the gRPC-free tests need (the rendezvous core needs OpenSSL; the rest is gRPC's;
# civetweb is common's, which is built with gRPC only).
SUBSET_DEPS=(abseil protobuf libuv1 gloo googletest nlohmann-json3 cli11 openssl)

# ---------------------------------------------------------------------------------------------
# Host packages
# ---------------------------------------------------------------------------------------------
host_packages=(g++-mingw-w64-x86-64-posix wine64 libz-mingw-w64-dev dpkg-dev cmake ninja-build
  perl python3 unicode-data protobuf-compiler protobuf-compiler-grpc xz-utils
  # the MSI (deploy/msi/build-msi.sh): wixl, and msibuild/msiinfo from msitools
  wixl msitools)
missing=()
for p in "${host_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get install -y "${missing[@]}" >/dev/null || {
    $SUDO apt-get update >/dev/null && $SUDO apt-get install -y "${missing[@]}" >/dev/null
  } || die_fetch "could not install ${missing[*]} (run: apt-get install -y ${missing[*]})"
fi

# ---------------------------------------------------------------------------------------------
# Private apt configuration with deb-src entries (leaves the system's apt alone).
# ---------------------------------------------------------------------------------------------
APT_DIR=$CACHE/apt
SRC_DIR=$CACHE/src
mkdir -p "$APT_DIR/parts" "$APT_DIR/lists/partial" "$SRC_DIR"
APT=(apt-get -q -o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$APT_DIR/parts"
  -o "Dir::State::Lists=$APT_DIR/lists" -o APT::Sandbox::User=root)
apt_src_ready() { compgen -G "$APT_DIR/lists/*Sources*" >/dev/null; }
apt_src_update() {
  local sources
  for sources in /etc/apt/sources.list.d/debian.sources; do
    [[ -f $sources ]] && sed 's/^Types: deb$/Types: deb-src/' "$sources" >"$APT_DIR/parts/src.sources"
  done
  if [[ -f /etc/apt/sources.list ]] && grep -q '^deb ' /etc/apt/sources.list; then
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >"$APT_DIR/parts/src.list"
  fi
  "${APT[@]}" update >/dev/null || die_fetch "apt-get update with deb-src entries failed (is a Debian mirror reachable?)"
}

# The newest OpenSSL 3.0 listed as a source package, e.g. 3.0.22 (no network once the lists exist).
openssl_version() {
  apt-cache -o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$APT_DIR/parts" \
    -o "Dir::State::Lists=$APT_DIR/lists" showsrc openssl |
    sed -n 's/^Version: \(3\.0\.[0-9]*\)-.*/\1/p' | sort -V | tail -1
}

apt_src_ready || apt_src_update
OPENSSL_VERSION=$(openssl_version)
[[ -n $OPENSSL_VERSION ]] || die_fetch "no OpenSSL 3.0 source package is listed by the mirror"

ZLIB_VERSION=$(dpkg-query -W -f='${Version}' libz-mingw-w64-dev)
COMPILER_VERSION=$($TRIPLE-g++-posix --version | head -1)

# The cache key: every version, the compiler, and the recipe revision (bump RECIPE_REV when the
# toolchain file or a recipe changes what gets installed). A dependency's own patches are part of
# its stamp instead: changing them rebuilds that dependency and the ones after it, not all.
KEY=$({
  for k in "${!SRC_VERSION[@]}"; do echo "$k=${SRC_VERSION[$k]}"; done | sort
  echo "openssl=$OPENSSL_VERSION zlib=$ZLIB_VERSION gloo=$GLOO_SHA256"
  echo "compiler=$COMPILER_VERSION recipe=$RECIPE_REV"
} | sha256sum | cut -c1-12)
PREFIX=$CACHE/mingw-$KEY
WORK=$CACHE/mingw-$KEY.work
STAMPS=$PREFIX/.stamps
mkdir -p "$PREFIX" "$WORK" "$STAMPS"
export MUSTER_MINGW_PREFIX=$PREFIX

# One build at a time per prefix (a second run waits instead of corrupting the first).
exec 9>"$PREFIX/.lock"
flock -n 9 || { log "another build-windows.sh is building $PREFIX; waiting"; flock 9; }

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
# Downloads (once) and unpacks a Debian source package with Debian's patches applied.
# Prints the unpacked directory.
unpack_debian_source() {
  local pkg=$1 version=${SRC_VERSION[$1]:-${LATER_VERSION[$1]%% *}}
  local upstream=${version%-*}
  upstream=${upstream#*:}
  local dsc=$SRC_DIR/${pkg}_${version}.dsc
  if [[ ! -f $dsc ]]; then
    (cd "$SRC_DIR" && "${APT[@]}" source --download-only "$pkg=$version" >/dev/null 2>&1) || {
      apt_src_update
      (cd "$SRC_DIR" && "${APT[@]}" source --download-only "$pkg=$version" >/dev/null) ||
        die_fetch "could not download the source of $pkg $version from the Debian mirror; if the mirror
       dropped that version, update SRC_VERSION[$pkg] (or LATER_VERSION[$pkg]) in $0 to the
       version of Debian's -dev package"
    }
  fi
  local dir=$WORK/$pkg-src
  rm -rf "$dir"
  dpkg-source --no-check -q -x "$dsc" "$dir" >/dev/null 2>&1 || die "dpkg-source -x $dsc failed"
  echo "$dir"
}

# Applies the repository's patches for a dependency (scripts/windows/patches/<dep>/*.patch).
apply_patches() {
  local dep=$1 dir=$2 p
  [[ -d $PATCHES/$dep ]] || return 0
  for p in "$PATCHES/$dep"/*.patch; do
    log "  patch $(basename "$p")"
    patch -d "$dir" -p1 --forward --quiet <"$p" || die "patch $p does not apply to $dep"
  done
}

# ccache (when present) makes a resumed or repeated dependency build cheap.
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
CMAKE_COMMON=("${LAUNCHER[@]}" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$TOOLCHAIN" -DMUSTER_MINGW_PREFIX="$PREFIX"
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_PREFIX_PATH="$PREFIX"
  -DBUILD_SHARED_LIBS=OFF -DBUILD_TESTING=OFF -DCMAKE_CXX_STANDARD=17)

cmake_build() { # <source dir> <build dir> [cmake args...]
  local src=$1 bld=$2
  shift 2
  "${NICE[@]}" cmake -S "$src" -B "$bld" "${CMAKE_COMMON[@]}" "$@" >"$bld.configure.log" 2>&1 ||
    { tail -30 "$bld.configure.log" >&2; die "configure failed (log: $bld.configure.log)"; }
  "${NICE[@]}" cmake --build "$bld" -j "$JOBS" >"$bld.build.log" 2>&1 ||
    { tail -30 "$bld.build.log" >&2; die "build failed (log: $bld.build.log)"; }
  cmake --install "$bld" >"$bld.install.log" 2>&1 ||
    { tail -30 "$bld.install.log" >&2; die "install failed (log: $bld.install.log)"; }
}

# ---------------------------------------------------------------------------------------------
# Recipes: build_<dep> builds and installs into $PREFIX.
# ---------------------------------------------------------------------------------------------
build_abseil() {
  local src
  src=$(unpack_debian_source abseil)
  apply_patches abseil "$src"
  cmake_build "$src" "$WORK/abseil-build" -DABSL_PROPAGATE_CXX_STD=ON -DABSL_BUILD_TESTING=OFF
}

build_libuv1() {
  local src
  src=$(unpack_debian_source libuv1)
  apply_patches libuv1 "$src"
  cmake_build "$src" "$WORK/libuv1-build" -DLIBUV_BUILD_TESTS=OFF -DLIBUV_BUILD_BENCH=OFF
}

# Gloo's source: MUSTER_GLOO_SOURCE (a directory or the tarball), else ../shared/deps/ beside the
# repository (Debian's gloo tarballs answer 404 on the mirror; see docs/windows.md).
gloo_source() {
  local candidates=() c
  if [[ -n ${MUSTER_GLOO_SOURCE:-} ]]; then
    [[ -e $MUSTER_GLOO_SOURCE ]] ||
      die "MUSTER_GLOO_SOURCE=$MUSTER_GLOO_SOURCE does not exist (a Gloo source directory or $GLOO_TARBALL)"
    candidates+=("$MUSTER_GLOO_SOURCE")
  fi
  candidates+=("$REPO/../shared/deps/$GLOO_TARBALL")
  for c in "${candidates[@]}"; do
    if [[ -d $c && -f $c/gloo/CMakeLists.txt ]]; then
      echo "dir:$c"
      return 0
    fi
    if [[ -f $c ]]; then
      [[ $(sha256sum <"$c" | cut -d' ' -f1) == "$GLOO_SHA256" ]] ||
        die "$c is not $GLOO_TARBALL (sha256 differs; expected $GLOO_SHA256)"
      echo "tar:$c"
      return 0
    fi
  done
  [[ -n ${MUSTER_GLOO_SOURCE:-} ]] &&
    die "MUSTER_GLOO_SOURCE=$MUSTER_GLOO_SOURCE is neither a Gloo source directory nor $GLOO_TARBALL"
  die "Gloo's source is missing. Debian's gloo source tarballs answer 404 on the mirror, so the
       Windows build takes it from MUSTER_GLOO_SOURCE (a directory or $GLOO_TARBALL) or from
       $REPO/../shared/deps/$GLOO_TARBALL (sha256 $GLOO_SHA256). Either put that
       tarball there, or check out the same commit and point MUSTER_GLOO_SOURCE at it:
         git clone https://github.com/facebookincubator/gloo
         git -C gloo checkout 5b143513263133af2b95547e97c07cebeb72bf72
         MUSTER_GLOO_SOURCE=\$PWD/gloo bash scripts/build-windows.sh"
}

build_gloo() {
  local where src=$WORK/gloo-src
  where=$(gloo_source)
  rm -rf "$src"
  mkdir -p "$src"
  case $where in
    dir:*) cp -a "${where#dir:}/." "$src/" ;;
    tar:*) tar -C "$src" --strip-components=1 -xzf "${where#tar:}" ;; # git archive: gloo-5b14351/
  esac
  apply_patches gloo "$src"
  # Gloo finds libuv with pkg-config outside MSVC: only the prefix's libuv.pc, never the host's.
  PKG_CONFIG_LIBDIR=$PREFIX/lib/pkgconfig PKG_CONFIG_PATH="" \
    cmake_build "$src" "$WORK/gloo-build" -DUSE_LIBUV=ON -DBUILD_TEST=OFF -DBUILD_BENCHMARK=OFF
}

build_googletest() {
  local src
  src=$(unpack_debian_source googletest)
  apply_patches googletest "$src"
  cmake_build "$src" "$WORK/googletest-build" -DBUILD_GMOCK=ON -DINSTALL_GTEST=ON \
    -Dgtest_disable_pthreads=OFF
}

build_nlohmann-json3() {
  local src
  src=$(unpack_debian_source nlohmann-json3)
  cmake_build "$src" "$WORK/nlohmann-json3-build" -DJSON_BuildTests=OFF -DJSON_Install=ON
}

build_cli11() {
  local src
  src=$(unpack_debian_source cli11)
  cmake_build "$src" "$WORK/cli11-build" -DCLI11_BUILD_TESTS=OFF -DCLI11_BUILD_EXAMPLES=OFF \
    -DCLI11_BUILD_DOCS=OFF -DCLI11_INSTALL=ON
}

build_protobuf() {
  local src
  src=$(unpack_debian_source protobuf)
  apply_patches protobuf "$src"
  # protoc itself comes from the host (Debian's protobuf-compiler, the same version), but libprotoc
  # is built: gRPC's build always compiles grpc_plugin_support against it.
  cmake_build "$src" "$WORK/protobuf-build" -Dprotobuf_BUILD_TESTS=OFF \
    -Dprotobuf_BUILD_PROTOC_BINARIES=ON -Dprotobuf_BUILD_SHARED_LIBS=OFF -Dprotobuf_WITH_ZLIB=ON \
    -Dprotobuf_BUILD_EXAMPLES=OFF
}

build_re2() {
  local src
  src=$(unpack_debian_source re2)
  apply_patches re2 "$src"
  # The +dfsg tarball drops re2's generated Unicode tables; regenerate them from Debian's
  # unicode-data (Debian's own build does the same in debian/rules).
  (
    cd "$src/re2"
    export _UNICODE_DIR=/usr/share/unicode
    [[ -f perl_groups.cc ]] || perl make_perl_groups.pl >perl_groups.cc
    [[ -f unicode_casefold.cc ]] || python3 make_unicode_casefold.py >unicode_casefold.cc
    [[ -f unicode_groups.cc ]] || python3 make_unicode_groups.py >unicode_groups.cc
  ) || die "could not regenerate re2's Unicode tables (is unicode-data installed?)"
  cmake_build "$src" "$WORK/re2-build" -DRE2_BUILD_TESTING=OFF
}

build_c-ares() {
  local src
  src=$(unpack_debian_source c-ares)
  apply_patches c-ares "$src"
  cmake_build "$src" "$WORK/c-ares-build" -DCARES_STATIC=ON -DCARES_SHARED=OFF \
    -DCARES_BUILD_TOOLS=OFF -DCARES_BUILD_TESTS=OFF -DCARES_STATIC_PIC=OFF
}

build_openssl() {
  local tarball=$SRC_DIR/openssl_$OPENSSL_VERSION.orig.tar.gz uri sha
  if [[ ! -f $tarball ]]; then
    # Only the .orig tarball: the .dsc and Debian's patches answer 404 on the security mirror.
    read -r uri sha < <(cd "$SRC_DIR" && "${APT[@]}" source --print-uris "openssl" 2>/dev/null |
      awk -v f="openssl_$OPENSSL_VERSION.orig.tar.gz" '$2 == f { gsub("\x27", "", $1);
        sub("SHA256:", "", $4); print $1, $4 }')
    [[ -n ${uri:-} ]] || die_fetch "the mirror lists no openssl_$OPENSSL_VERSION.orig.tar.gz"
    /usr/lib/apt/apt-helper -o APT::Sandbox::User=root download-file "$uri" "$tarball.part" "SHA256:$sha" >/dev/null ||
      die_fetch "could not download $uri"
    mv "$tarball.part" "$tarball"
  fi
  local src=$WORK/openssl-src
  rm -rf "$src"
  mkdir -p "$src"
  tar -C "$src" --strip-components=1 -xzf "$tarball"
  apply_patches openssl "$src"
  (
    cd "$src"
    "${NICE[@]}" ./Configure mingw64 --cross-compile-prefix=$TRIPLE- no-shared no-tests \
      --prefix="$PREFIX" --libdir=lib >"$WORK/openssl.configure.log" 2>&1
    "${NICE[@]}" make -j "$JOBS" build_sw >"$WORK/openssl.build.log" 2>&1
    make install_sw >"$WORK/openssl.install.log" 2>&1
  ) || { tail -30 "$WORK"/openssl.*.log >&2; die "OpenSSL build failed (logs: $WORK/openssl.*.log)"; }
}

build_civetweb() {
  local src
  src=$(unpack_debian_source civetweb)
  apply_patches civetweb "$src"
  # Debian's options (debian/rules) where they matter to muster, static. TLS as on Linux, where
  # musterd's HttpServer hands civetweb its own SSL_CTX: linked against the prefix's OpenSSL 3
  # (Debian's package loads libssl.so at run time instead; there is no such file on Windows).
  # civetweb picks its OpenSSL 3 API from the headers it then includes; its CMake default
  # OPENSSL_API_1_1 would be a second, conflicting API.
  cmake_build "$src" "$WORK/civetweb-build" -DCIVETWEB_BUILD_TESTING=OFF \
    -DCIVETWEB_ENABLE_SERVER_EXECUTABLE=OFF -DCIVETWEB_INSTALL_EXECUTABLE=OFF \
    -DCIVETWEB_ENABLE_CXX=OFF -DCIVETWEB_ENABLE_WEBSOCKETS=ON -DCIVETWEB_ENABLE_ASAN=OFF \
    -DCIVETWEB_ENABLE_SSL=ON -DCIVETWEB_ENABLE_SSL_DYNAMIC_LOADING=OFF \
    -DCIVETWEB_SSL_OPENSSL_API_1_1=OFF -DCMAKE_C_FLAGS="-D_WIN32_WINNT=0x0A00 -DOPENSSL_API_3_0" \
    -DOPENSSL_ROOT_DIR="$PREFIX" -DOPENSSL_USE_STATIC_LIBS=ON
}

build_grpc() {
  local src
  src=$(unpack_debian_source grpc)
  apply_patches grpc "$src"
  # Every third_party dependency comes from $PREFIX (Debian's source has third_party/ stripped);
  # the code generator plugins come from the host (Debian's grpc_cpp_plugin, the same version).
  # gRPC_BUILD_CODEGEN stays on: it is what builds grpc++_reflection (with the host's plugin).
  cmake_build "$src" "$WORK/grpc-build" -DgRPC_BUILD_TESTS=OFF -DgRPC_BUILD_CODEGEN=ON \
    -DgRPC_BUILD_CSHARP_EXT=OFF -DgRPC_BUILD_GRPC_CPP_PLUGIN=OFF \
    -DgRPC_BUILD_GRPC_CSHARP_PLUGIN=OFF -DgRPC_BUILD_GRPC_NODE_PLUGIN=OFF \
    -DgRPC_BUILD_GRPC_OBJECTIVE_C_PLUGIN=OFF -DgRPC_BUILD_GRPC_PHP_PLUGIN=OFF \
    -DgRPC_BUILD_GRPC_PYTHON_PLUGIN=OFF -DgRPC_BUILD_GRPC_RUBY_PLUGIN=OFF \
    -DgRPC_ABSL_PROVIDER=package -DgRPC_CARES_PROVIDER=package -DgRPC_PROTOBUF_PROVIDER=package \
    -DgRPC_PROTOBUF_PACKAGE_TYPE=CONFIG -DgRPC_RE2_PROVIDER=package -DgRPC_SSL_PROVIDER=package \
    -DgRPC_ZLIB_PROVIDER=package -DgRPC_BENCHMARK_PROVIDER=none -DgRPC_INSTALL=ON \
    -DOPENSSL_ROOT_DIR="$PREFIX" -DOPENSSL_USE_STATIC_LIBS=ON \
    -DZLIB_LIBRARY=/usr/$TRIPLE/lib/libz.a -DZLIB_INCLUDE_DIR=/usr/$TRIPLE/include \
    -DPROTOBUF_INCLUDE_DIRS="$PREFIX/include" -D_gRPC_PROTOBUF_PROTOC_EXECUTABLE=/usr/bin/protoc \
    -D_gRPC_CPP_PLUGIN=/usr/bin/grpc_cpp_plugin
}

# ---------------------------------------------------------------------------------------------
# The dependencies, each once.
# ---------------------------------------------------------------------------------------------
log "dependency prefix $PREFIX"
# A dependency's fingerprint: its patches and the fingerprints of what it builds against (the
# recipe itself is covered by RECIPE_REV). A changed patch rebuilds that dependency and its users.
declare -A NEEDS=([gloo]=libuv1 [grpc]="abseil protobuf re2 c-ares openssl" [civetweb]=openssl)
fingerprint() {
  local d
  {
    [[ -d $PATCHES/$1 ]] && (cd "$PATCHES/$1" && find . -type f | sort | xargs sha256sum)
    # Only the later dependencies print their version: the others' fingerprints stay as stamped.
    [[ -n ${LATER_VERSION[$1]:-} ]] && echo "version=${LATER_VERSION[$1]}"
    for d in ${NEEDS[$1]:-}; do fingerprint "$d"; done
  } | sha256sum | cut -c1-12
}
# Whether the cache holds dependency $1 as this checkout would build it.
dep_cached() { [[ -f $STAMPS/$1 ]] && [[ $(sed -n 2p "$STAMPS/$1") == "$(fingerprint "$1")" ]]; }

# --ci: the full build whenever the cache is warm; the subset, loudly, only when it is cold.
SUBSET_WHY=""
if ((SUBSET)); then
  SUBSET_WHY="--subset asked for it"
elif ((CI_MODE)); then
  cold=()
  # A later dependency (civetweb, a minute) is built below whatever the cache holds: a cache that
  # lacks only it is warm, not a reason for the subset.
  for dep in "${DEPS[@]}"; do
    [[ -n ${LATER_VERSION[$dep]:-} ]] || dep_cached "$dep" || cold+=("$dep")
  done
  if ((${#cold[@]})); then
    SUBSET=1
    SUBSET_WHY="the dependency cache lacks ${cold[*]} (cold: building them takes ~30 min)"
  else
    log "--ci: the dependency cache is warm: every Windows target, the whole Windows suite"
  fi
fi
# Printed before the build and again at the end, where a CI log's reader looks.
subset_banner() {
  local line="========================================================================"
  {
    echo "build-windows: $line"
    echo "build-windows: ONLY THE gRPC-FREE WINDOWS SUBSET: musterd.exe, muster.exe,"
    echo "build-windows: libmuster_comm, muster-bench.exe and their tests are NOT built or run."
    echo "build-windows: Why: $SUBSET_WHY."
    echo "build-windows: Cache: $PREFIX"
    echo "build-windows: Warm the cache once with 'bash scripts/build-windows.sh --deps-only'"
    echo "build-windows: (about 40 minutes on 2 cores); later --ci runs build and test everything."
    echo "build-windows: $line"
  } >&2
}
if ((SUBSET)); then
  DEPS=("${SUBSET_DEPS[@]}")
  subset_banner
fi
# Gloo's source is not on the mirror: say so before spending half an hour on the others.
if ((SUBSET)) && [[ ! -f $STAMPS/gloo && -z ${MUSTER_GLOO_SOURCE:-} &&
  ! -e $REPO/../shared/deps/$GLOO_TARBALL ]]; then
  log "Gloo's source is not here (MUSTER_GLOO_SOURCE, ../shared/deps/$GLOO_TARBALL): building"
  log "without Gloo, so gloo_uv_test is left out (docs/windows.md says how to get the source)"
  DEPS=("${DEPS[@]/gloo/}")
fi
[[ -f $STAMPS/gloo ]] || [[ " ${DEPS[*]} " != *" gloo "* ]] || gloo_source >/dev/null
for dep in "${DEPS[@]}"; do
  [[ -n $dep ]] || continue
  dep_cached "$dep" && continue
  fp=$(fingerprint "$dep")
  log "building $dep (log: $WORK/$dep-build.*.log)"
  start=$(date +%s)
  "build_$dep"
  secs=$(($(date +%s) - start))
  printf '%s\n%s\n' "$secs" "$fp" >"$STAMPS/$dep"
  rm -rf "$WORK/$dep-build" "$WORK/$dep-src" "$WORK"/*.orig.tar.*
  log "built $dep in ${secs}s"
done
log "dependencies ready in $PREFIX"
((DEPS_ONLY)) && exit 0

# ---------------------------------------------------------------------------------------------
# muster itself
# ---------------------------------------------------------------------------------------------
log "configuring muster in $BUILD_DIR"
# The subset builds the same targets whether or not this cache has gRPC (a developer's usually
# does).
CI_ARGS=(-DCMAKE_DISABLE_FIND_PACKAGE_gRPC=OFF)
((SUBSET)) && CI_ARGS=(-DCMAKE_DISABLE_FIND_PACKAGE_gRPC=ON)
cmake -S "$REPO" -B "$BUILD_DIR" "${LAUNCHER[@]}" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$TOOLCHAIN" \
  -DMUSTER_MINGW_PREFIX="$PREFIX" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_BUILD_TYPE=Release \
  -DMUSTER_WINDOWS_PARTIAL=ON "${CI_ARGS[@]}" >/dev/null
start=$(date +%s)
"${NICE[@]}" cmake --build "$BUILD_DIR" -j "$JOBS"
log "built $BUILD_DIR/bin in $(($(date +%s) - start))s"
if ((!SUBSET)) && [[ ! -f $BUILD_DIR/bin/musterd.exe || ! -f $BUILD_DIR/bin/muster.exe ]]; then
  # WindowsPartial.cmake leaves out what it cannot find; with every dependency cached that is a
  # broken cache or build, never something to pass over.
  die "every dependency is cached, yet musterd.exe or muster.exe was not built (see the
       'muster (Windows, partial)' line of: cmake -S $REPO -B $BUILD_DIR)"
fi
if [[ -f $BUILD_DIR/bin/musterd.exe && -f $BUILD_DIR/bin/muster_comm.dll ]]; then
  bash "$REPO/deploy/msi/build-msi.sh" "$BUILD_DIR" >&2 || die "building the MSI failed"
fi
rc=0
if ((RUN_TESTS)); then
  # The first wine start makes ~/.wine (tens of seconds); a persistent wineserver then saves a
  # start per test.
  export WINEDEBUG=-all
  /usr/lib/wine/wine64 wineboot --init >/dev/null 2>&1 || true
  # wineboot returns before a new prefix is set up; a service installed meanwhile is lost (the
  # install answers OK twice, the start fails), so wait until wine's processes have ended.
  timeout 180 /usr/lib/wine/wineserver -w >/dev/null 2>&1 || true
  /usr/lib/wine/wineserver -p60 >/dev/null 2>&1 || true
  start=$(date +%s)
  # shellcheck disable=SC2086 # MUSTER_WINDOWS_CTEST_ARGS: words for ctest
  (cd "$BUILD_DIR" && ctest --output-on-failure ${MUSTER_WINDOWS_CTEST_ARGS:-}) || rc=$?
  log "ctest ran in $(($(date +%s) - start))s"
fi
((SUBSET)) && subset_banner
exit "$rc"
