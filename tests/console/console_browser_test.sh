#!/usr/bin/env bash
# musterd's console in headless chromium (console_browser_test.mjs): a real musterd with TLS
# (--tls-cert: the console is HTTPS with the same certificate), --http-listen, --require-token
# and an admin token; a failed two-node job whose worker wrote HTML
# to stderr, a running job with its own token, and a job started while the page is open.
# Needs chromium, node and npm; puppeteer-core (pinned by package-lock.json, no browser
# download) is installed under the build directory from the npm registry on first use.
# usage: console_browser_test.sh SOURCE_DIR BUILD_DIR [SCREENSHOT_DIR]
source "$1/tests/deploy/lib.sh"
src=$1 build=$2 shots=${3:-}
here=$src/tests/console
bin=$build/bin
chromium=$(command -v chromium || true)
[[ -n $chromium ]] || skip "chromium not found (Debian package chromium): the console is not tested in a browser"
command -v node >/dev/null || skip "node not found (Debian package nodejs)"
command -v npm >/dev/null || skip "npm not found (Debian package npm)"
scratch

step "puppeteer-core (npm ci, pinned; it drives Debian's chromium, downloads no browser)"
node_dir=$build/console-browser-test
npm_ci_pinned "$here" "$node_dir" "the console is not tested in a browser"
cp "$here/console_browser_test.mjs" "$node_dir/"

step "a certificate for 127.0.0.1 (self-signed: it is its own CA for the agents)"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$SCRATCH/key.pem" -out "$SCRATCH/cert.pem" \
  >/dev/null 2>&1 || fail "openssl could not make a certificate"
# chromium trusts exactly this key (its SPKI hash), and nothing else it would otherwise refuse.
spki=$(openssl x509 -in "$SCRATCH/cert.pem" -pubkey -noout | openssl pkey -pubin -outform der |
  openssl dgst -sha256 -binary | base64)
tls_conf="tls_ca=$SCRATCH/cert.pem"

step "musterd with TLS, --http-listen, --require-token, an admin token"
token() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
admin=$(token) job_token=$(token) other_token=$(token)
printf '%s\n' "$admin" >"$SCRATCH/admin.token"
chmod 600 "$SCRATCH/admin.token"
setsid "$bin/musterd" --listen=127.0.0.1:0 --port-file="$SCRATCH/port" --http-listen=127.0.0.1:0 \
  --tls-cert="$SCRATCH/cert.pem" --tls-key="$SCRATCH/key.pem" \
  --require-token --admin-token-file="$SCRATCH/admin.token" >"$SCRATCH/musterd.log" 2>&1 &
PIDS+=($!)
wait_for_file "$SCRATCH/port" 20
port=$(cat "$SCRATCH/port")
deadline=$((SECONDS + 20))
until http=$(sed -n 's/.*serving .* on port \([0-9]*\).*/\1/p' "$SCRATCH/musterd.log") && [[ -n $http ]]; do
  ((SECONDS < deadline)) || { cat "$SCRATCH/musterd.log"; fail "musterd named no HTTP port"; }
  sleep 0.1
done
echo "musterd on $port, HTTPS on $http"
grep -q "on port $http (HTTPS" "$SCRATCH/musterd.log" || fail "musterd does not say its HTTP port serves HTTPS"
# Plain HTTP gets nothing from the HTTPS port: a token never travels in clear.
if command -v curl >/dev/null; then
  [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http/healthz") == 000 ]] ||
    fail "plain HTTP got an answer from the HTTPS port"
  [[ $(curl -s -o /dev/null -w '%{http_code}' --cacert "$SCRATCH/cert.pem" \
    "https://127.0.0.1:$http/healthz") == 200 ]] || fail "/healthz over HTTPS did not answer 200"
fi

# agent JOB TOKEN NODES WORKER [NPROC]: one agent of a job, in its own process group.
agent() {
  MUSTER_RDZV_TOKEN=$2 setsid "$bin/muster" --nnodes="$3" --nproc-per-node="${5:-1}" \
    --rdzv-backend=muster --rdzv-endpoint="127.0.0.1:$port" --rdzv-id="$1" \
    --rdzv-conf="$tls_conf" --max-restarts=0 --no-python "$4" >>"$SCRATCH/$1.log" 2>&1 &
  PIDS+=($!)
}

# wait_running JOB TOKEN: until `muster status` says the job is RUNNING (30 s at most).
wait_running() {
  local deadline=$((SECONDS + 30))
  until MUSTER_RDZV_TOKEN=$2 "$bin/muster" status --rdzv-endpoint="127.0.0.1:$port" \
      --rdzv-conf="$tls_conf" "$1" \
      2>/dev/null | grep -q RUNNING; do
    ((SECONDS < deadline)) || fail "$1 was not RUNNING within 30 s"
    sleep 0.2
  done
}

step "failjob: two nodes, rank 1 fails with HTML on its stderr"
cat >"$SCRATCH/fail.sh" <<'SH'
#!/bin/sh
if [ "$RANK" = "1" ]; then
  echo 'ValueError: <img src=x onerror="window.__pwned=1"> bad input' >&2
  exit 3
fi
sleep 30
SH
cat >"$SCRATCH/sleep.sh" <<'SH'
#!/bin/sh
exec sleep 120
SH
chmod +x "$SCRATCH/fail.sh" "$SCRATCH/sleep.sh"
agent failjob "$other_token" 2 "$SCRATCH/fail.sh"
fail_a=${PIDS[-1]}
agent failjob "$other_token" 2 "$SCRATCH/fail.sh"
fail_b=${PIDS[-1]}
for pid in $fail_a $fail_b; do
  timeout 60 tail --pid="$pid" -f /dev/null || fail "failjob's agents did not end within 60 s"
done
grep -q "exited with code 3" "$SCRATCH/failjob.log" || { cat "$SCRATCH/failjob.log"; fail "failjob did not fail as planned"; }

step "tokjob: one node with its own token, running"
agent tokjob "$job_token" 1 "$SCRATCH/sleep.sh"
wait_running tokjob "$job_token"

step "hangjob: two nodes of two ranks, rank 3 stuck in stuck_in_data_loader(), the rest in wait_in_allreduce()"
[[ -x $bin/stuck_ranks ]] || fail "$bin/stuck_ranks is missing: build the tests' workers"
agent hangjob "$other_token" 2 "$bin/stuck_ranks" 2
agent hangjob "$other_token" 2 "$bin/stuck_ranks" 2
wait_running hangjob "$other_token"

step "the browser"
live_cmd="MUSTER_RDZV_TOKEN=$other_token exec setsid $bin/muster --nnodes=1 --nproc-per-node=1 \
--rdzv-backend=muster --rdzv-endpoint=127.0.0.1:$port --rdzv-id=livejob --rdzv-conf=$tls_conf --no-python \
$SCRATCH/sleep.sh >$SCRATCH/livejob.log 2>&1"
ADMIN_TOKEN=$admin JOB_TOKEN=$job_token LIVE_CMD=$live_cmd SHOTS=$shots CHROMIUM=$chromium \
  SPKI=$spki timeout 170 node "$node_dir/console_browser_test.mjs" "https://127.0.0.1:$http" \
  || { tail -20 "$SCRATCH/musterd.log"; fail "the console failed in the browser (above)"; }
pkill -f -- "--rdzv-id=livejob" 2>/dev/null || true
grep -q "$admin\|$job_token\|$other_token" "$SCRATCH/musterd.log" && fail "a token reached musterd's log"
echo "PASS"
