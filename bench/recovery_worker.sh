#!/usr/bin/env bash
# A worker for bench/recovery.sh: records when it started and when it ended, in $REC_DIR, and
# sleeps. It exits 1 when $REC_DIR/exit.$REC_NODE appears (the "worker exit" case).
#   start.<node>.<pid>  the time it started (s since the epoch, ns precision)
#   end.<node>.<pid>    the time it was told to stop (SIGTERM) or exited itself
#   exit.<node>.done    the time it exited on request
set -u
now() { date +%s.%N; }
echo "$(now)" >"$REC_DIR/start.$REC_NODE.$$"
trap 'echo "$(now)" >"$REC_DIR/end.$REC_NODE.$$"; exit 0' TERM INT
while true; do
  if [[ -e $REC_DIR/exit.$REC_NODE ]]; then
    rm -f "$REC_DIR/exit.$REC_NODE"
    t=$(now)
    echo "$t" >"$REC_DIR/end.$REC_NODE.$$"
    echo "$t" >"$REC_DIR/exit.$REC_NODE.done"
    exit 1
  fi
  sleep 0.02 &
  wait $!
done
