#!/usr/bin/env bash
# Builds the muster MSI from the MinGW cross-build with Debian's wixl (package wixl, from msitools)
# and msibuild (package msitools). scripts/build-windows.sh runs it; docs/windows.md describes the
# package.
#
#   bash deploy/msi/build-msi.sh BUILD_DIR [OUTPUT.msi] [VERSION]
#
# BUILD_DIR: the Windows build (bin/muster.exe, bin/musterd.exe, bin/muster_comm.dll,
# lib/libmuster_comm.dll.a). OUTPUT defaults to BUILD_DIR/muster-VERSION.msi, VERSION to the
# project's version in CMakeLists.txt (tests build a higher one to test an upgrade).
#
# wixl lacks a few WiX features, which this script adds to the database afterwards (msibuild):
#   - the Environment table: the install folder appended to the system PATH, taken out again on
#     uninstall ("=-*PATH", "[~];[INSTALLDIR]");
#   - the Config component's attributes: 64-bit, NeverOverwrite and Permanent (an upgrade or a
#     repair keeps the admin's musterd.conf, an uninstall leaves it);
#   - the ServiceStart component's condition: MUSTERD_START=1 starts the service at the end;
#     MUSTERD_START is a secure property (passed to the server side of a managed install).
# It also checks that the programs need no DLL but Windows' own and muster_comm.dll (the MinGW
# runtime is linked in statically), so the MSI ships no runtime DLL.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
die() { echo "build-msi: error: $*" >&2; exit 1; }

[[ $# -ge 1 && $# -le 3 ]] || die "usage: build-msi.sh BUILD_DIR [OUTPUT.msi] [VERSION]"
BUILD_DIR=$(cd "$1" && pwd)
VERSION=${3:-$(sed -n 's/^project(muster VERSION \([0-9.]*\).*/\1/p' "$REPO/CMakeLists.txt")}
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "version '$VERSION' is not x.y.z"
OUT=${2:-$BUILD_DIR/muster-$VERSION.msi}

for tool in wixl msibuild msiinfo; do
  command -v "$tool" >/dev/null ||
    die "$tool is missing: apt-get install -y wixl msitools (scripts/install-deps.sh installs them)"
done
for f in bin/muster.exe bin/musterd.exe bin/muster_comm.dll lib/libmuster_comm.dll.a; do
  [[ -f $BUILD_DIR/$f ]] || die "$BUILD_DIR/$f is missing (build it first: bash scripts/build-windows.sh)"
done

# No runtime DLLs to ship: every import must be Windows' own (or muster_comm.dll, shipped).
OBJDUMP=${OBJDUMP:-x86_64-w64-mingw32-objdump}
if command -v "$OBJDUMP" >/dev/null; then
  allowed='^(kernel32|advapi32|bcrypt|crypt32|dbghelp|iphlpapi|msvcrt|ntdll|rstrtmgr|user32|userenv|ws2_32|ole32|psapi|shell32|wevtapi|muster_comm|api-ms-win-.*)\.dll$'
  for f in muster.exe musterd.exe muster_comm.dll; do
    bad=$("$OBJDUMP" -p "$BUILD_DIR/bin/$f" | sed -n 's/^[[:space:]]*DLL Name: //p' |
      tr '[:upper:]' '[:lower:]' | grep -Ev "$allowed" || true)
    [[ -z $bad ]] || die "$f needs DLLs the MSI does not ship: $bad"
  done
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# wixl takes only relative Source paths: bin/, lib/ and repo/ in a staging folder.
ln -s "$BUILD_DIR/bin" "$tmp/bin"
ln -s "$BUILD_DIR/lib" "$tmp/lib"
ln -s "$REPO" "$tmp/repo"
(cd "$tmp" && wixl -a x64 -D Version="$VERSION" -o muster.msi "$HERE/muster.wxs")

# The system PATH: '=' set on install, '-' removed on uninstall, '*' the machine's environment;
# "[~];" appends to the existing value.
{
  printf 'Environment\tName\tValue\tComponent_\r\ns72\tl255\tL255\ts72\r\nEnvironment\tEnvironment\r\n'
  printf 'MusterPath\t=-*PATH\t[~];[INSTALLDIR]\tMusterPath\r\n'
} >"$tmp/Environment.idt"
secure=$(msiinfo export "$tmp/muster.msi" Property | awk -F'\t' '$1 == "SecureCustomProperties" { print $2 }')
[[ -n $secure ]] || die "wixl wrote no SecureCustomProperties (MajorUpgrade's properties)"
# Component attributes: 0x100 64-bit, 0x80 NeverOverwrite, 0x10 Permanent.
(cd "$tmp" && msibuild muster.msi -i Environment.idt)
msibuild "$tmp/muster.msi" \
  -q "UPDATE \`Component\` SET \`Attributes\` = 400 WHERE \`Component\` = 'Config'" \
  -q "UPDATE \`Component\` SET \`Condition\` = 'MUSTERD_START = \"1\"' WHERE \`Component\` = 'ServiceStart'" \
  -q "UPDATE \`Property\` SET \`Value\` = '$secure;MUSTERD_START' WHERE \`Property\` = 'SecureCustomProperties'"
mv "$tmp/muster.msi" "$OUT"
echo "build-msi: $OUT (muster $VERSION, $(du -h "$OUT" | cut -f1))"
