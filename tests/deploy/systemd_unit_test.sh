#!/usr/bin/env bash
# deploy/systemd/musterd.service: `systemd-analyze verify` finds nothing to say about it, and
# `systemd-analyze security --offline=true` scores its exposure at 2.0 or less. Both run offline
# (PID 1 need not be systemd; here it often is not). The drop-ins verify with it: TLS and tokens
# (musterd-security.conf), and replica mode over etcd (musterd-replica.conf restarts a replica
# that lost the leadership, exit 75; musterd-etcd-tls.conf), which must not score worse.
# usage: systemd_unit_test.sh SOURCE_DIR BIN_DIR
source "$(dirname "$0")/lib.sh"
src=$1 bin=$2
unit=$src/deploy/systemd/musterd.service
command -v systemd-analyze >/dev/null || skip "systemd-analyze not found (Debian package systemd)"
echo "PID 1 is $(cat /proc/1/comm 2>/dev/null || echo unknown); systemd-analyze $(systemd-analyze --version | head -1)"
scratch

step "the unit has what the deployment promises"
for line in Type=notify NotifyAccess=main Restart=on-failure WatchdogSec= DynamicUser=yes \
  StateDirectory=muster ProtectSystem=strict ProtectHome=yes PrivateTmp=yes PrivateDevices=yes \
  NoNewPrivileges=yes 'CapabilityBoundingSet=$' RestrictAddressFamilies= \
  SystemCallFilter=@system-service 'ExecStart=/usr/bin/musterd --config=/etc/muster/musterd.conf' \
  EnvironmentFile=-/etc/default/musterd WantedBy=multi-user.target; do
  grep -Eq "^${line}" "$unit" || fail "musterd.service has no line ${line}"
done

step "systemd-analyze verify (ExecStart pointed at the built musterd)"
# verify checks that ExecStart's program exists: use the one just built.
sed -e "s#/usr/bin/musterd#$bin/musterd#" "$unit" > "$SCRATCH/musterd.service"
out=$(systemd-analyze verify "$SCRATCH/musterd.service" 2>&1) || fail "verify failed: $out"
# verify exits 0 on unknown keys and bad values, but says so.
[[ -z $out ]] || fail "systemd-analyze verify: $out"
echo "verify: clean"

step "systemd-analyze security --offline=true"
report=$(systemd-analyze security --offline=true "$unit" 2>&1) || true
score=$(sed -n 's/.*Overall exposure level for musterd.service: \([0-9.]*\).*/\1/p' <<<"$report")
[[ -n $score ]] || fail "no exposure score in: $report"
echo "exposure score: $score (must be <= 2.0)"
awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' || { echo "$report"; fail "exposure $score > 2.0"; }
# --threshold makes systemd-analyze itself fail above 20 (2.0 on its 0-100 scale).
systemd-analyze security --offline=true --threshold=20 "$unit" >/dev/null 2>&1 ||
  fail "systemd-analyze security --threshold=20 failed"

step "a broken unit is caught (the check itself works)"
sed -e 's/^ProtectHome=yes/ProtectHom=yes/' "$SCRATCH/musterd.service" > "$SCRATCH/broken.service"
out=$(systemd-analyze verify "$SCRATCH/broken.service" 2>&1) || true
grep -q "Unknown key" <<<"$out" || fail "verify did not flag an unknown key: $out"
step "the security drop-in (LoadCredential=, TLS, tokens) verifies with the unit"
dropin=$src/deploy/systemd/musterd-security.conf
for line in 'LoadCredential=tls.key:' 'LoadCredential=admin.token:' '--require-token' \
  'tls-cert=\$\{CREDENTIALS_DIRECTORY\}'; do
  grep -Eq -- "$line" "$dropin" || fail "musterd-security.conf has no $line"
done
mkdir -p "$SCRATCH/musterd.service.d"
sed -e "s#/usr/bin/musterd#$bin/musterd#" "$dropin" > "$SCRATCH/musterd.service.d/security.conf"
out=$(cd "$SCRATCH" && SYSTEMD_UNIT_PATH="$SCRATCH:" systemd-analyze verify "$SCRATCH/musterd.service" 2>&1) ||
  fail "verify with the drop-in failed: $out"
[[ -z $out ]] || fail "systemd-analyze verify (with the drop-in): $out"
echo "drop-in: clean"

step "replica mode: musterd-replica.conf (+ musterd-etcd-tls.conf) verifies, exit 75 restarts, no worse score"
replica=$src/deploy/systemd/musterd-replica.conf
etcd_tls=$src/deploy/systemd/musterd-etcd-tls.conf
# Exit 75 (lost the leadership) is a clean exit that is always restarted; exit 2 (a configuration
# error) is not retried; no start limit, so a standby outlasts an etcd outage.
for line in Restart=always SuccessExitStatus=75 RestartForceExitStatus=75 RestartPreventExitStatus=2 \
  StartLimitIntervalSec=0 After=etcd.service; do
  grep -Eq "^${line}\$" "$replica" || fail "musterd-replica.conf has no line ${line}"
done
# It changes how musterd is restarted, never what runs or its sandbox.
grep -Eq '^(ExecStart|User|DynamicUser|Protect|Private|Restrict|SystemCall|Capability)' "$replica" &&
  fail "musterd-replica.conf must not change ExecStart= or the hardening"
for line in 'LoadCredential=etcd-ca.crt:' 'LoadCredential=etcd.crt:' 'LoadCredential=etcd.key:' \
  'etcd-ca=\$\{CREDENTIALS_DIRECTORY\}/etcd-ca.crt' 'etcd-cert=\$\{CREDENTIALS_DIRECTORY\}/etcd.crt' \
  'etcd-key=\$\{CREDENTIALS_DIRECTORY\}/etcd.key' 'ExecStart=/usr/bin/musterd --config=/etc/muster/musterd.conf .*\$MUSTERD_OPTS$'; do
  grep -Eq -- "$line" "$etcd_tls" || fail "musterd-etcd-tls.conf has no $line"
done
# The config file documents the replica keys (commented: without them musterd runs alone).
for key in etcd-endpoints etcd-prefix advertise-addr election-ttl; do
  grep -Eq "^#${key} = " "$src/deploy/systemd/musterd.conf" || fail "musterd.conf does not document ${key}"
done
rm -rf "$SCRATCH/musterd.service.d"
mkdir -p "$SCRATCH/replica/musterd.service.d"
sed -e "s#/usr/bin/musterd#$bin/musterd#" "$unit" > "$SCRATCH/replica/musterd.service"
cp "$replica" "$SCRATCH/replica/musterd.service.d/replica.conf"
for with in replica.conf etcd-tls.conf; do
  [[ $with == etcd-tls.conf ]] &&
    sed -e "s#/usr/bin/musterd#$bin/musterd#" "$etcd_tls" > "$SCRATCH/replica/musterd.service.d/etcd-tls.conf"
  out=$(cd "$SCRATCH/replica" && SYSTEMD_UNIT_PATH="$SCRATCH/replica:" systemd-analyze verify "$SCRATCH/replica/musterd.service" 2>&1) ||
    fail "verify with $(ls "$SCRATCH/replica/musterd.service.d" | tr '\n' ' ')failed: $out"
  [[ -z $out ]] || fail "systemd-analyze verify (with $with): $out"
  echo "unit + $(ls "$SCRATCH/replica/musterd.service.d" | tr '\n' ' '): clean"
done
# security --offline reads the drop-ins beside the unit (a weakening drop-in raises the score,
# checked below), so this is the replica's own exposure.
replica_score=$(cd "$SCRATCH/replica" && SYSTEMD_UNIT_PATH="$SCRATCH/replica:" systemd-analyze security --offline=true "$SCRATCH/replica/musterd.service" 2>&1 |
  sed -n 's/.*Overall exposure level for musterd.service: \([0-9.]*\).*/\1/p') || true
[[ -n $replica_score ]] || fail "no exposure score for the replica unit"
echo "replica exposure score: $replica_score (the plain unit's: $score)"
awk -v r="$replica_score" -v s="$score" 'BEGIN { exit !(r <= s) }' || fail "replica exposure $replica_score > $score"
printf '[Service]\nProtectSystem=no\nPrivateDevices=no\n' > "$SCRATCH/replica/musterd.service.d/zz-weaker.conf"
weaker=$(cd "$SCRATCH/replica" && SYSTEMD_UNIT_PATH="$SCRATCH/replica:" systemd-analyze security --offline=true "$SCRATCH/replica/musterd.service" 2>&1 |
  sed -n 's/.*Overall exposure level for musterd.service: \([0-9.]*\).*/\1/p') || true
awk -v w="${weaker:-0}" -v r="$replica_score" 'BEGIN { exit !(w > r) }' ||
  fail "a weakening drop-in did not raise the score ($weaker): drop-ins are not being scored"
echo "a weakening drop-in scores $weaker: drop-ins are scored"
echo "systemd unit: ok"
