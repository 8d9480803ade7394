#!/usr/bin/env bash
# deploy/systemd/musterd.service: `systemd-analyze verify` finds nothing to say about it, and
# `systemd-analyze security --offline=true` scores its exposure at 2.0 or less. Both run offline
# (PID 1 need not be systemd; here it often is not).
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
echo "systemd unit: ok"
