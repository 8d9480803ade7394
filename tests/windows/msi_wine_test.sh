#!/usr/bin/env bash
# The muster MSI under wine (issue 40): install, the service, upgrade, uninstall.
#
#   msi_wine_test.sh BUILD_DIR WINE64
#
# Builds two MSIs from BUILD_DIR with deploy/msi/build-msi.sh: the project's version and one
# a patch level higher. In a private WINEPREFIX (a temporary directory, so nothing of ~/.wine is
# touched):
# 1. `msiexec /i old.msi /qn MUSTERD_START=0`: the files are in C:\Program Files\muster (muster.exe,
#    musterd.exe, muster_comm.dll, the header, the import library, the docs), the config in
#    C:\ProgramData\muster\musterd.conf, the install folder on the system PATH; the SCM lists
#    musterd (`sc query`), STOPPED, automatic, its command line naming the config file (the
#    service's registry key: wine's sc has no qc); the event source "muster" is registered.
# 2. The admin edits the config (listen on 127.0.0.1:0, a port file) and `net start musterd`:
#    RUNNING, the port file appears, and the installed muster.exe's `muster status` is answered.
#    The event log: wine has none, but with WINEDEBUG=+eventlog it prints each ReportEventW of
#    musterd (events.txt): the start (an information event), then a job that fails (muster.exe,
#    one worker exiting 3, no restarts) as an error event naming the job and the cause.
# 3. `msiexec /i new.msi /qn` (MUSTERD_START defaults to 1): the stop event of the old service;
#    one product, the new version; the
#    edited config kept byte for byte; the service restarted by the install, with that config
#    (a new port file, `muster status` answered). Then a misspelt key in the config: the
#    service stops at once and an error event says musterd did not start.
# 4. `msiexec /x new.msi /qn`: the service and the event source are gone (`sc query` fails),
#    C:\Program Files\muster is gone, PATH is as before the install; only C:\ProgramData\muster
#    remains (the admin's config and the log: Permanent on purpose).
#
# Run by ctest in the Windows build (natively: it runs wixl, msibuild and wine64 itself), labels
# "e2e;msi". Skipped (exit 77) without wixl/msibuild or without musterd.exe. Every wait has a
# deadline; the prefix's wineserver is killed and the prefix removed at the end.
set -uo pipefail

BUILD_DIR=${1:?usage: $0 BUILD_DIR WINE64}
WINE=${2:?usage: $0 BUILD_DIR WINE64}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
for tool in wixl msibuild msiinfo; do
  command -v "$tool" >/dev/null ||
    { echo "SKIP: $tool is missing (apt-get install -y wixl msitools)"; exit 77; }
done
[[ -f $BUILD_DIR/bin/musterd.exe && -f $BUILD_DIR/bin/muster.exe ]] ||
  { echo "SKIP: $BUILD_DIR has no musterd.exe/muster.exe (a build without gRPC)"; exit 77; }
WINESERVER=$(dirname "$WINE")/wineserver

WORK=$(mktemp -d /tmp/msi-wine-XXXXXX)
export WINEPREFIX=$WORK/prefix WINEDEBUG=-all
# shellcheck source=tests/windows/wine_test_lib.sh
source "$(dirname "$0")/wine_test_lib.sh"
cleanup() {
  # The prefix is private: ending its wineserver ends musterd and everything else in it.
  timeout 30 "$WINESERVER" -k >/dev/null 2>&1
  timeout 30 "$WINESERVER" -w >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

w() { timeout "${T:-120}" "$WINE" "$@"; } # a wine program, with a deadline
PF="$WINEPREFIX/drive_c/Program Files/muster"
PD="$WINEPREFIX/drive_c/ProgramData/muster"
ENV_KEY='HKLM\System\CurrentControlSet\Control\Session Manager\Environment'

system_path() { w reg query "$ENV_KEY" /v PATH 2>/dev/null | tr -d '\r' | sed -n 's/.*REG_[A-Z_]*SZ[[:space:]]*//p'; }
entries() { tr ';' '\n' <<<"$1" | sed '/^$/d'; } # a PATH's entries, one a line
service_state() { w sc query musterd 2>/dev/null | tr -d '\r' | sed -n 's/.*STATE.*: [0-9]*[[:space:]]*//p'; }
# Waits up to $1 seconds for the service to be in state $2 (RUNNING, STOPPED).
wait_state() {
  local deadline=$((SECONDS + $1)) s
  while ((SECONDS < deadline)); do
    s=$(service_state)
    [[ $s == "$2"* ]] && return 0
    sleep 1
  done
  fail "musterd is '$(service_state)', not $2, after $1 s"
}
# Waits up to $1 seconds for the port file; prints the port.
wait_port() {
  local deadline=$((SECONDS + $1))
  while ((SECONDS < deadline)); do
    if [[ -s $PD/port ]] && grep -qE '^[0-9]+' "$PD/port"; then
      tr -d '\r\n' <"$PD/port"
      return 0
    fi
    sleep 0.5
  done
  cp "$PD/musterd.log" "$WORK/musterd.log" 2>/dev/null
  fail "no port file from the musterd service within $1 s"
}
# `muster status` from the installed muster.exe against 127.0.0.1:$1.
status_answers() {
  T=120 w "C:\\Program Files\\muster\\muster.exe" status --rdzv-endpoint="127.0.0.1:$1" \
    --timeout=30 >"$WORK/status.out" 2>&1 ||
    { cat "$WORK/status.out"; fail "muster status against the service on port $1 failed"; }
  grep -q "musterd at 127.0.0.1:$1" "$WORK/status.out" ||
    { cat "$WORK/status.out"; fail "muster status did not name the server"; }
}
msiexec() { # msiexec ARGS... with a verbose log in $WORK/msiexec-N.log
  local n=$((${MSI_N:-0} + 1))
  MSI_N=$n
  T=300 w msiexec "$@" /l*v "$(winpath "$WORK/msiexec-$n.txt")" ||
    { tr -d '\0\r' <"$WORK/msiexec-$n.txt" 2>/dev/null | tail -n 40; fail "msiexec $* failed"; }
}

VERSION=$(sed -n 's/^project(muster VERSION \([0-9.]*\).*/\1/p' "$REPO/CMakeLists.txt")
NEXT=${VERSION%.*}.$((${VERSION##*.} + 1))
bash "$REPO/deploy/msi/build-msi.sh" "$BUILD_DIR" "$WORK/old.msi" "$VERSION" >/dev/null ||
  fail "build-msi.sh $VERSION failed"
bash "$REPO/deploy/msi/build-msi.sh" "$BUILD_DIR" "$WORK/new.msi" "$NEXT" >/dev/null ||
  fail "build-msi.sh $NEXT failed"
echo "built muster $VERSION and $NEXT MSIs"

# A new prefix: wineboot returns before it is set up; wait for wine's processes to end.
T=180 w wineboot --init >/dev/null 2>&1
timeout 180 "$WINESERVER" -w
# One wineserver for the rest (services.exe stays up between the calls), and services.exe started
# by a process with the eventlog debug channel on: the services it starts (musterd) inherit that
# and its stderr, so every ReportEventW of musterd lands in events.txt (wine has no event log).
"$WINESERVER" -p
WINEDEBUG=-all,+eventlog T=300 w cmd /c exit 0 2>"$WORK/events.txt" >/dev/null
# Waits up to $1 seconds for events.txt to have a line matching the regex $2.
wait_event() {
  local deadline=$((SECONDS + $1))
  while ((SECONDS < deadline)); do
    grep -qE "$2" "$WORK/events.txt" && return 0
    sleep 0.5
  done
  cat "$WORK/events.txt"
  fail "no event matching '$2' within $1 s (WINEDEBUG=+eventlog, above)"
}
PATH_BEFORE=$(system_path)
[[ -n $PATH_BEFORE ]] || fail "no system PATH in the new prefix"

# --- 1. install, not started ----------------------------------------------------------------
msiexec /i "$(winpath "$WORK/old.msi")" /qn MUSTERD_START=0
for f in muster.exe musterd.exe muster_comm.dll musterd.conf.example include/muster/comm/c_api.h \
  lib/libmuster_comm.dll.a doc/windows.md doc/README.md; do
  [[ -f $PF/$f ]] || fail "the install did not put $f in C:\\Program Files\\muster"
done
[[ -f $PD/musterd.conf ]] || fail "no C:\\ProgramData\\muster\\musterd.conf"
cmp -s "$PD/musterd.conf" "$REPO/deploy/msi/musterd.conf" || fail "musterd.conf differs from deploy/msi/"
[[ $(service_state) == STOPPED* ]] || fail "with MUSTERD_START=0 musterd is '$(service_state)', not STOPPED"
# wine's sc has no qc: the service's registry key instead.
w reg query 'HKLM\System\CurrentControlSet\Services\musterd' | tr -d '\r' >"$WORK/qc.out"
grep -q 'ImagePath.*muster\\musterd.exe"\? --config="C:\\ProgramData\\muster\\musterd.conf" --service-name=musterd$' \
  "$WORK/qc.out" || { cat "$WORK/qc.out"; fail "the service's command line is not musterd.exe --config=..."; }
grep -q 'Start[[:space:]]*REG_DWORD[[:space:]]*0x2$' "$WORK/qc.out" ||
  { cat "$WORK/qc.out"; fail "the service does not start at boot (SERVICE_AUTO_START)"; }
EVENT_KEY='HKLM\SYSTEM\CurrentControlSet\Services\EventLog\Application\muster'
w reg query "$EVENT_KEY" | tr -d '\r' >"$WORK/source.out"
grep -q 'EventMessageFile[[:space:]]*REG_EXPAND_SZ[[:space:]]*C:\\Program Files\\muster\\musterd.exe$' \
  "$WORK/source.out" || { cat "$WORK/source.out"; fail "the event source 'muster' is not registered"; }
[[ ";$(system_path);" == *";C:\Program Files\muster\;"* ]] ||
  fail "C:\\Program Files\\muster is not on the system PATH: $(system_path)"
echo "1. installed $VERSION: files, config, PATH, the event source, the service STOPPED (MUSTERD_START=0)"

# --- 2. the admin edits the config, starts the service ------------------------------------------
{
  echo "# edited by msi_wine_test"
  echo "listen = '127.0.0.1:0'"
  echo "port-file = 'C:\\ProgramData\\muster\\port'"
  echo "log-file = 'C:\\ProgramData\\muster\\musterd.log'"
} >"$PD/musterd.conf"
cp "$PD/musterd.conf" "$WORK/edited.conf"
T=120 w net start musterd >"$WORK/net-start.out" 2>&1 ||
  { cat "$WORK/net-start.out"; cp "$PD/musterd.log" "$WORK/musterd.log" 2>/dev/null; fail "net start musterd failed"; }
wait_state 60 RUNNING
port=$(wait_port 60)
status_answers "$port"
wait_event 30 "trace:eventlog:ReportEventW L\"musterd listening on 127.0.0.1:$port "
# A job that fails (one worker, exit 3, no restarts): an error event naming it.
T=180 w "C:\\Program Files\\muster\\muster.exe" --nnodes=1 --nproc-per-node=1 --rdzv-backend=muster \
  --rdzv-endpoint="127.0.0.1:$port" --rdzv-id=msi-fail --max-restarts=0 --no-python \
  'C:\windows\system32\cmd.exe' /c exit 3 >"$WORK/job.out" 2>&1
rc=$?
[[ $rc == 1 ]] || { cat "$WORK/job.out"; fail "the failing job's muster.exe exited $rc, not 1"; }
wait_event 30 'err:eventlog:ReportEventW L"job msi-fail: FAILED in round 1: worker rank 0 .*exited with code 3'
echo "2. net start musterd: RUNNING with the edited config, port $port, muster status answered;"
echo "   events: the start (information), the failed job (error)"

# --- 3. upgrade, started by the install -----------------------------------------------------------
rm -f "$PD/port"
msiexec /i "$(winpath "$WORK/new.msi")" /qn
cmp -s "$PD/musterd.conf" "$WORK/edited.conf" || fail "the upgrade changed the edited musterd.conf"
w reg query 'HKLM\Software\Microsoft\Windows\CurrentVersion\Uninstall' /s /v DisplayVersion 2>/dev/null |
  tr -d '\r' | grep -o 'REG_SZ.*' | sed 's/REG_SZ[[:space:]]*//' | sort >"$WORK/versions.out"
[[ $(cat "$WORK/versions.out") == "$NEXT" ]] ||
  fail "installed versions after the upgrade: $(tr '\n' ' ' <"$WORK/versions.out") (want only $NEXT)"
wait_event 30 'trace:eventlog:ReportEventW L"musterd stopped"'
wait_state 60 RUNNING
port=$(wait_port 60)
status_answers "$port"
echo "3. upgraded to $NEXT: the stop event, the edited config kept, the service restarted with it (port $port)"

# A misspelt key: the service does not start, and the error event says so.
T=120 w net stop musterd >/dev/null 2>&1
wait_state 60 STOPPED
echo "lisen = '127.0.0.1:0'" >"$PD/musterd.conf"
# (wine's `net start` may answer before musterd exits: the state and the event decide.)
T=120 w net start musterd >/dev/null 2>&1
wait_event 30 'err:eventlog:ReportEventW L"musterd did not start: a bad flag or --config file'
wait_state 30 STOPPED
cp "$WORK/edited.conf" "$PD/musterd.conf"
echo "   a misspelt key in musterd.conf: the service does not start, an error event says why"

# --- 4. uninstall ---------------------------------------------------------------------------------
msiexec /x "$(winpath "$WORK/new.msi")" /qn
w sc query musterd >/dev/null 2>&1 && fail "the service is still there after the uninstall"
w reg query "$EVENT_KEY" >/dev/null 2>&1 && fail "the event source is still registered"
[[ ! -e $PF ]] || fail "C:\\Program Files\\muster is still there: $(cd "$PF" && find . | head)"
# wine leaves the separator behind ("...;;"): compare the entries.
[[ $(entries "$(system_path)") == "$(entries "$PATH_BEFORE")" ]] ||
  fail "the system PATH is '$(system_path)' after the uninstall, was '$PATH_BEFORE'"
cmp -s "$PD/musterd.conf" "$WORK/edited.conf" || fail "the uninstall removed or changed musterd.conf"
echo "4. uninstalled: no service, no event source, no C:\\Program Files\\muster, PATH restored; the config kept"
echo "msi_wine_test: OK"
