# Sourced by the replica benchmarks (bench/failover.sh, bench/store_replicated.sh): a 3-member etcd
# cluster on loopback with etcd 3.4's default timing (100 ms heartbeat, 1 s election).
#   start_etcd_cluster DIR   sets $endpoints (http://127.0.0.1:P,...), appends the members' pids
#                            to the caller's pids array, and returns once a quorum answers.
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_etcd_cluster() {
  local dir=$1 i cluster="" cps=() pps=()
  endpoints=""
  for i in 0 1 2; do
    cps[$i]=$(free_port); pps[$i]=$(free_port)
    cluster+="${cluster:+,}e$i=http://127.0.0.1:${pps[$i]}"
    endpoints+="${endpoints:+,}http://127.0.0.1:${cps[$i]}"
  done
  for i in 0 1 2; do
    setsid /usr/bin/etcd --name "e$i" --data-dir "$dir/e$i" \
      --listen-client-urls "http://127.0.0.1:${cps[$i]}" --advertise-client-urls "http://127.0.0.1:${cps[$i]}" \
      --listen-peer-urls "http://127.0.0.1:${pps[$i]}" --initial-advertise-peer-urls "http://127.0.0.1:${pps[$i]}" \
      --initial-cluster "$cluster" --initial-cluster-state new --log-level warn >"$dir/etcd$i.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 100); do
    ETCDCTL_API=3 /usr/bin/etcdctl --endpoints "$endpoints" get x >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "etcd did not form a quorum: $(tail -3 "$dir"/etcd*.log)" >&2
  return 1
}
