#!/usr/bin/env bash
# musterd.exe's --http-listen under wine (issue 40): the probes, the metrics and the console, as
# on Linux, read from Linux over loopback.
#
#   musterd_http_wine_test.sh MUSTERD_EXE WINE64 [MUSTER_EXE WIN_WORKER_EXE]
#
# `wine64 musterd.exe --listen=127.0.0.1:0 --http-listen=127.0.0.1:0 --require-token
# --admin-token-file=...`; the HTTP port is the one its log names. Then, with python3:
#   /healthz 200 "ok", /readyz 200, HEAD /healthz 200 without a body, POST 405;
#   /metrics: Prometheus text with muster_ gauges;
#   / and /console/console.js: the console's page and script (the embedded files, whole);
#   /api/v1/jobs: 401 with WWW-Authenticate without a token or with one not "Bearer", 200 JSON
#   with the admin token;
#   an unknown path: 404 naming the served ones.
# A second musterd.exe asking for the same HTTP port is refused (exit 1, naming the port). Ctrl-C
# (SIGINT) then drains the first: exit 0.
# HTTPS: musterd.exe with --tls-cert/--tls-key (a self-signed certificate for 127.0.0.1 made with
# the host's openssl) serves --http-listen over TLS 1.2+ with that certificate (python3 verifies
# it); a plaintext request gets no HTTP answer. Skipped, saying so, without an openssl program.
# With MUSTER_EXE and WIN_WORKER_EXE: the agent's --health-port (the same HttpServer):
# `muster.exe --standalone --health-port=0 win_worker.exe --sleep=8` answers /healthz, /readyz
# ("RUNNING round 1") and /metrics (muster_agent_ gauges) while its worker runs, then exits 0.
#
# Wine 8.0's wineserver (Debian 12) sometimes dies of an assertion in its socket polling
# (server/sock.c complete_async_poll: a poll completed twice, an event racing the poll's timeout)
# while civetweb select()s: about one run in ten here, never the same step. So the checks run in a
# private wine prefix, with a wineserver of their own whose stderr is kept: a crash takes no other
# test's wine processes with it, and when that assertion is what ended a run, the run is repeated
# (3 runs at most, each saying why); any other failure fails at once.
#
# Run by ctest in the Windows build (add_test(COMMAND bash ...): this script runs natively,
# musterd.exe under wine64). Every wait has a deadline; every process started here is reaped.
set -euo pipefail

MUSTERD_EXE=${1:?usage: $0 MUSTERD_EXE WINE64 [MUSTER_EXE WIN_WORKER_EXE]}
WINE=${2:?usage: $0 MUSTERD_EXE WINE64 [MUSTER_EXE WIN_WORKER_EXE]}
MUSTER_EXE=${3:-}
WORKER_EXE=${4:-}
export WINEDEBUG=-all

# Without MUSTER_HTTP_WINE_CHECKS: the private prefix and the runs; with it, one run's checks.
if [[ -z ${MUSTER_HTTP_WINE_CHECKS:-} ]]; then
  WINESERVER=$(dirname "$WINE")/wineserver
  [[ -x $WINESERVER ]] || { echo "FAIL: no wineserver beside $WINE"; exit 1; }
  PREFIX_DIR=$(mktemp -d /tmp/musterd-http-wineprefix-XXXXXX)
  export WINEPREFIX=$PREFIX_DIR/prefix
  SERVER_PID=""
  end_prefix() {
    timeout 30 "$WINESERVER" -k >/dev/null 2>&1 || true
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then kill -9 "$SERVER_PID"; fi
    wait 2>/dev/null || true
    rm -rf "$PREFIX_DIR"
  }
  trap end_prefix EXIT
  # A new prefix: wineboot returns before it is set up; wait for wine's processes to end.
  timeout 180 "$WINE" wineboot --init >/dev/null 2>&1 || true
  timeout 180 "$WINESERVER" -w >/dev/null 2>&1 || true
  for attempt in 1 2 3; do
    # Persistent (-p) for the run, in the foreground (-f) so that its stderr is ours.
    "$WINESERVER" -f -p >"$PREFIX_DIR/wineserver-$attempt.log" 2>&1 &
    SERVER_PID=$!
    rc=0
    MUSTER_HTTP_WINE_CHECKS=1 MUSTER_TEST_WINESERVER_PID=$SERVER_PID \
      bash "$0" "$MUSTERD_EXE" "$WINE" "$MUSTER_EXE" "$WORKER_EXE" || rc=$?
    timeout 30 "$WINESERVER" -k >/dev/null 2>&1 || true
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
    ((rc != 0)) || exit 0
    if ! grep -q "complete_async_poll: Assertion" "$PREFIX_DIR/wineserver-$attempt.log"; then
      exit "$rc"
    fi
    echo "run $attempt: wine's wineserver died of its socket-polling assertion (a wine 8.0 bug):"
    grep "Assertion" "$PREFIX_DIR/wineserver-$attempt.log" | head -1
  done
  echo "FAIL: the wineserver died in each of 3 runs"
  exit 1
fi

WORK=$(mktemp -d /tmp/musterd-http-win-XXXXXX)
MUSTERD_PID=""
AGENT_PID=""
source "$(dirname "$0")/wine_test_lib.sh"
cleanup() {
  # reap's wait answers the killed process's status: not an error here (set -e).
  reap "$MUSTERD_PID" "$AGENT_PID" || true
  rm -rf "$WORK"
}
trap cleanup EXIT
# Fails at once when the run's wineserver has died (ended, or a zombie not yet reaped): every wine
# process then hangs or dies, and waiting out a deadline would only delay the next run.
check_wineserver() {
  local pid=${MUSTER_TEST_WINESERVER_PID:-} state
  [[ -n $pid ]] || return 0
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
  [[ -n $state && $state != Z ]] || fail "the wineserver died ($*)"
}

TOKEN=admin-$RANDOM$RANDOM$RANDOM
printf '%s\n' "$TOKEN" >"$WORK/admin.token"

# logged_port PID LOG PATTERN WHAT: waits up to 60 s for LOG to name a port (the sed PATTERN's
# \1) while process PID runs, and prints it; fails naming WHAT if PID exits first or no port comes.
# Called as PORT=$(logged_port ...) || exit 1: its failures print to stderr, not into PORT.
logged_port() {
  local pid=$1 log=$2 pattern=$3 what=$4 deadline=$((SECONDS + 60)) port=""
  while [[ -z $port ]] && ((SECONDS < deadline)); do
    kill -0 "$pid" 2>/dev/null || fail "$what exited before it served" >&2
    check_wineserver "while $what started" >&2
    port=$(sed -n "s/$pattern/\1/p" "$log" | head -1 || true)
    [[ -n $port ]] || sleep 0.2
  done
  [[ -n $port ]] || fail "$what logged no port in 60 s" >&2
  echo "$port"
}

# start_musterd LOG KIND FLAGS...: musterd.exe on 127.0.0.1:0 with --http-listen=127.0.0.1:0 and
# FLAGS, logging to $WORK/LOG; sets MUSTERD_PID and PORT, the HTTP port its log names, and checks
# that the log says KIND ("HTTP" or "HTTPS").
start_musterd() {
  local log=$WORK/$1 kind=$2
  shift 2
  : >"$log"
  "$WINE" "$MUSTERD_EXE" --listen=127.0.0.1:0 --http-listen=127.0.0.1:0 "$@" >"$log" 2>&1 &
  MUSTERD_PID=$!
  PORT=$(logged_port "$MUSTERD_PID" "$log" '.*musterd serving .* on port \([0-9][0-9]*\).*' \
    "musterd.exe (serving $kind)") || exit 1
  grep -q "on port $PORT (${kind}[,)]" "$log" ||
    fail "musterd.exe's log does not say it serves $kind on $PORT"
  echo "musterd.exe serves $kind on 127.0.0.1:$PORT"
}

# stop_musterd: Ctrl-C (SIGINT) drains it: exit 0 within 30 s.
stop_musterd() {
  local deadline=$((SECONDS + 30)) rc=0
  kill -INT "$MUSTERD_PID"
  while kill -0 "$MUSTERD_PID" 2>/dev/null && ((SECONDS < deadline)); do
    check_wineserver "while musterd.exe drained"
    sleep 0.2
  done
  kill -0 "$MUSTERD_PID" 2>/dev/null && fail "musterd.exe still runs 30 s after SIGINT"
  wait "$MUSTERD_PID" || rc=$?
  MUSTERD_PID=""
  ((rc == 0)) || fail "musterd.exe exited $rc after SIGINT, expected 0"
  echo "ok: SIGINT drained musterd.exe (exit 0)"
}

# --- HTTP, with the admin token. ---------------------------------------------------------------
start_musterd musterd.log HTTP --require-token \
  --admin-token-file="$(winpath "$WORK/admin.token")"

# The requests, from Linux. Each has a 10 s timeout; urllib checks Content-Length against the
# body it reads (a short body raises IncompleteRead).
python3 - "$PORT" "$TOKEN" <<'EOF' || fail "the HTTP checks failed (above)"
import http.client
import json
import sys

port, token = int(sys.argv[1]), sys.argv[2]


def get(path, method="GET", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path, headers=headers or {})
    r = conn.getresponse()
    body = r.read()
    conn.close()
    length = r.getheader("Content-Length")
    if method != "HEAD" and length is not None and int(length) != len(body):
        raise AssertionError(f"{path}: Content-Length {length}, body {len(body)} bytes")
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body.decode("utf-8", "replace")


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}")
        sys.exit(1)
    print(f"ok: {what}")


status, headers, body = get("/healthz")
check(status == 200 and body == "ok\n", f"/healthz 200 'ok' (got {status} {body!r})")
check(headers.get("cache-control") == "no-store", "/healthz: Cache-Control: no-store")
status, headers, body = get("/healthz", method="HEAD")
check(status == 200 and body == "" and headers.get("content-length") == "3",
      f"HEAD /healthz: 200, Content-Length 3, no body (got {status}, {body!r})")
status, headers, body = get("/healthz", method="POST")
check(status == 405 and headers.get("allow") == "GET, HEAD", f"POST /healthz: 405 (got {status})")
status, _, body = get("/readyz")
check(status == 200, f"/readyz 200 (got {status} {body!r})")

status, headers, body = get("/metrics")
check(status == 200 and headers.get("content-type", "").startswith("text/plain"),
      f"/metrics 200 text/plain (got {status} {headers.get('content-type')})")
for line in ("# TYPE muster_jobs gauge", 'muster_jobs{state="RUNNING"} 0',
             "# TYPE muster_agents_connected gauge", "muster_agents_connected 0",
             'muster_build_info{version="'):
    check(line in body, f"/metrics has {line!r}")

status, headers, body = get("/")
check(status == 200 and headers.get("content-type", "").startswith("text/html")
      and body.lstrip().lower().startswith("<!doctype html"),
      f"/: the console's page (got {status} {headers.get('content-type')})")
check("default-src 'none'" in headers.get("content-security-policy", ""),
      "/: the console's Content-Security-Policy")
scripts = [s.split('"')[0] for s in body.split('src="')[1:]]
check(bool(scripts), f"/ names its scripts ({scripts})")
for path in scripts:
    status, headers, js = get(path)
    check(status == 200 and "javascript" in headers.get("content-type", "") and len(js) > 100,
          f"{path}: 200 JavaScript, {len(js)} bytes")

status, headers, body = get("/api/v1/jobs")
check(status == 401 and headers.get("www-authenticate", "").startswith("Bearer"),
      f"/api/v1/jobs without a token: 401 Bearer (got {status})")
status, _, body = get("/api/v1/jobs", headers={"Authorization": "Basic " + token})
check(status == 401, f"/api/v1/jobs with a credential not \"Bearer\": 401 (got {status})")
status, headers, body = get("/api/v1/jobs", headers={"Authorization": "Bearer " + token})
check(status == 200 and headers.get("content-type", "").startswith("application/json"),
      f"/api/v1/jobs with the admin token: 200 JSON (got {status} {body[:200]!r})")
check(json.loads(body).get("jobs") == [], "/api/v1/jobs lists no jobs")

status, _, body = get("/no/such/path")
check(status == 404 and "/healthz" in body, f"/no/such/path: 404 naming /healthz (got {status})")
EOF

# A second musterd.exe on the same HTTP port: refused, naming it (not a silent second listener).
# Its output goes to a file, not a pipe: wine's own processes (services.exe, ...), when this
# process is the one that starts them, inherit its stdout and would hold a $(...) open.
rc=0
timeout 30 "$WINE" "$MUSTERD_EXE" --listen=127.0.0.1:0 --http-listen=127.0.0.1:"$PORT" \
  >"$WORK/second.out" 2>&1 || rc=$?
out=$(cat "$WORK/second.out")
check_wineserver "while a second musterd.exe ran"
((rc == 1)) || fail "a second musterd.exe on HTTP port $PORT: exit $rc, expected 1: $out"
grep -q "cannot serve HTTP on 127.0.0.1:$PORT" <<<"$out" ||
  fail "a second musterd.exe on HTTP port $PORT: no reason given: $out"
echo "ok: a second musterd.exe on HTTP port $PORT is refused (exit 1, the port named)"

stop_musterd

# --- HTTPS with --tls-cert: civetweb serves muster's SSL_CTX. ----------------------------------
if ! command -v openssl >/dev/null; then
  echo "SKIP (HTTPS part): no openssl program to make a certificate with (apt-get install openssl)"
else
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=localhost -addext "subjectAltName=IP:127.0.0.1" -keyout "$WORK/key.pem" \
    -out "$WORK/cert.pem" >"$WORK/openssl.out" 2>&1 || fail "openssl req failed"
  start_musterd musterd-tls.log HTTPS --tls-cert="$(winpath "$WORK/cert.pem")" \
    --tls-key="$(winpath "$WORK/key.pem")"
  python3 - "$PORT" "$WORK/cert.pem" <<'EOF' || fail "the HTTPS checks failed (above)"
import http.client
import ssl
import sys

port, ca = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(cafile=ca)
for path, want in (("/healthz", "ok\n"), ("/metrics", "# TYPE muster_jobs gauge")):
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    conn.request("GET", path)
    version = conn.sock.version()  # the response's Connection: close drops conn.sock
    r = conn.getresponse()
    body = r.read().decode()
    conn.close()
    if r.status != 200 or want not in body or version not in ("TLSv1.2", "TLSv1.3"):
        print(f"FAIL: HTTPS {path}: {r.status} {version} {body[:200]!r}")
        sys.exit(1)
    print(f"ok: HTTPS {path}: 200 over {version}, the certificate verified")
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
try:
    conn.request("GET", "/healthz")
    status = conn.getresponse().status
    print(f"FAIL: plaintext HTTP on the HTTPS port answered {status}")
    sys.exit(1)
except (http.client.HTTPException, OSError) as e:
    print(f"ok: plaintext HTTP on the HTTPS port gets no HTTP answer ({type(e).__name__})")
EOF
  stop_musterd
fi

# --- muster.exe's --health-port: the agent's probes, while its worker runs. --------------------
if [[ -n $MUSTER_EXE && -n $WORKER_EXE ]]; then
  : >"$WORK/agent.log"
  "$WINE" "$MUSTER_EXE" --standalone --nproc-per-node=1 --health-port=0 \
    "$(winpath "$WORKER_EXE")" --sleep=8 >"$WORK/agent.log" 2>&1 &
  AGENT_PID=$!
  APORT=$(logged_port "$AGENT_PID" "$WORK/agent.log" '.*serving \/healthz.* on port \([0-9][0-9]*\).*' \
    "muster.exe (--health-port)") || exit 1
  python3 - "$APORT" <<'EOF' || fail "the --health-port checks failed (above)"
import http.client
import sys
import time

port = int(sys.argv[1])


def get(path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read().decode()
    conn.close()
    return r.status, body


status, body = get("/healthz")
if status != 200 or body != "ok\n":
    print(f"FAIL: the agent's /healthz: {status} {body!r}")
    sys.exit(1)
print("ok: muster.exe --health-port /healthz 200 'ok'")
deadline = time.time() + 5  # the round starts as the worker does
while True:
    status, body = get("/readyz")
    if status == 200 and "RUNNING" in body:
        break
    if time.time() > deadline:
        print(f"FAIL: the agent's /readyz: {status} {body!r} (wanted 200 RUNNING)")
        sys.exit(1)
    time.sleep(0.2)
print(f"ok: muster.exe --health-port /readyz 200 {body.strip()!r}")
status, body = get("/metrics")
if status != 200 or "# TYPE muster_agent_round gauge" not in body:
    print(f"FAIL: the agent's /metrics: {status} {body[:300]!r}")
    sys.exit(1)
print("ok: muster.exe --health-port /metrics has muster_agent_round")
EOF
  # The worker sleeps 8 s, then the job ends: exit 0 within 60 s.
  deadline=$((SECONDS + 60))
  while kill -0 "$AGENT_PID" 2>/dev/null && ((SECONDS < deadline)); do
    check_wineserver "while muster.exe ran"
    sleep 0.2
  done
  kill -0 "$AGENT_PID" 2>/dev/null && fail "muster.exe still runs 60 s after its start"
  rc=0
  wait "$AGENT_PID" || rc=$?
  AGENT_PID=""
  ((rc == 0)) || fail "muster.exe exited $rc, expected 0"
  echo "ok: muster.exe's job ended (exit 0)"
fi
echo "PASS: musterd.exe serves /healthz, /readyz, /metrics, the console and /api/v1 under wine" \
  "(HTTP and HTTPS)${MUSTER_EXE:+; muster.exe --health-port too}"
