#!/usr/bin/env bash
# The console with many jobs (issue 37): one musterd holding N jobs (muster-loadgen: one simulated
# agent per job, heartbeating), and in headless chromium the cluster page's first paint with data
# and each "Next page", against the same page of the JSON API fetched by curl and `muster status`
# listing every job, in the same run.
#
#   bash bench/console.sh [JOBS] [PAGES]     (default 20000 jobs, 10 pages; needs build/bin)
#
# Needs chromium, node and npm (puppeteer-core is installed as tests/console pins it).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-20000}
pages=${2:-10}
bin=build/bin
for b in musterd muster muster-loadgen; do
  [[ -x $bin/$b ]] || { echo "missing $bin/$b: bash scripts/build.sh" >&2; exit 1; }
done
command -v chromium >/dev/null || { echo "chromium missing: bash scripts/install-deps.sh" >&2; exit 1; }
node_dir=build/console-browser-test
if [[ ! -d $node_dir/node_modules/puppeteer-core ]]; then
  mkdir -p "$node_dir"
  cp tests/console/package.json tests/console/package-lock.json "$node_dir/"
  (cd "$node_dir" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
fi
cp bench/console_bench.mjs "$node_dir/"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [[ -n $p ]] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/admin.token"
chmod 600 "$work/admin.token"
"$bin/musterd" --listen=127.0.0.1:0 --port-file="$work/port" --http-listen=127.0.0.1:0 \
  --admin-token-file="$work/admin.token" >"$work/musterd.log" 2>&1 &
pids+=($!)
musterd_pid=$!
for _ in $(seq 100); do [[ -s $work/port ]] && break; sleep 0.1; done
port=$(cat "$work/port")
http=""
for _ in $(seq 100); do
  http=$(sed -n 's/.*serving .* on port \([0-9]*\).*/\1/p' "$work/musterd.log")
  [[ -n $http ]] && break
  sleep 0.1
done
[[ -n $http ]] || { cat "$work/musterd.log"; echo "musterd named no HTTP port" >&2; exit 1; }
"$bin/muster-loadgen" --endpoint="127.0.0.1:$port" --agents="$jobs" --jobs="$jobs" \
  --seconds=600 --heartbeat-timeout-ms=60000 >"$work/loadgen.log" 2>&1 &
pids+=($!)
token=$(cat "$work/admin.token")
echo "waiting for $jobs jobs..." >&2
for _ in $(seq 600); do
  n=$(curl -s -H "Authorization: Bearer $token" "http://127.0.0.1:$http/api/v1/cluster" |
      sed -n 's/.*"jobs": \([0-9]*\).*/\1/p')
  [[ ${n:-0} -ge $jobs ]] && break
  sleep 0.5
done
echo "jobs=$n"
curl_ms=()
for _ in $(seq 10); do
  t=$(curl -s -o /dev/null -w '%{time_total}' -H "Authorization: Bearer $token" \
      "http://127.0.0.1:$http/api/v1/jobs?page_size=100")
  curl_ms+=("$(awk -v t="$t" 'BEGIN {printf "%.1f", t * 1000}')")
done
printf 'api_page_ms (curl, 10 runs)=%s\n' "$(printf '%s\n' "${curl_ms[@]}" | sort -n | awk '{a[NR]=$1} END {print "median " a[int((NR+1)/2)] ", min " a[1] ", max " a[NR]}')"
start=$(date +%s%N)
MUSTER_RDZV_TOKEN=$token "$bin/muster" status --rdzv-endpoint="127.0.0.1:$port" --timeout=60 >/dev/null
echo "muster_status_all_ms=$(( ($(date +%s%N) - start) / 1000000 ))"
echo "musterd_rss_mib=$(awk '/VmRSS/ {printf "%.0f", $2 / 1024}' /proc/$musterd_pid/status)"
node "$node_dir/console_bench.mjs" "http://127.0.0.1:$http" "$token" "$pages"
