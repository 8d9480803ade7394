#!/usr/bin/env bash
# The local Job simulation: the Indexed Job of k8s/base, rendered by kubectl kustomize, runs its
# exact pod command and environment N times (JOB_COMPLETION_INDEX=0..N-1) against a local musterd
# standing in for the musterd Service (k8s/simulate_job.py says what else stands in for the
# cluster). The Job must succeed. The same for k8s/overlays/replicated, whose agents name the
# headless Service of the musterd replicas (one musterd stands in for them here). Also: muster exits 2 on a configuration error, the code the
# Job's podFailurePolicy fails the Job on.
# usage: k8s_job_test.sh SOURCE_DIR OUT_DIR   (OUT_DIR/root: the deploy_install fixture)
source "$(dirname "$0")/lib.sh"
src=$1 out=$2
root=$out/root
[[ -x $root/usr/bin/muster ]] || fail "no installed muster under $root (the deploy_install test)"
command -v kubectl >/dev/null || skip "kubectl not found: the Job cannot be rendered here"
/usr/bin/python3 -c 'import yaml' 2>/dev/null || skip "/usr/bin/python3 has no yaml module (Debian package python3-yaml)"
scratch

step "render k8s/base"
kubectl kustomize "$src/k8s/base" >"$SCRATCH/base.yaml"

step "run the Job's pods"
timeout 300 /usr/bin/python3 "$src/tests/deploy/k8s/simulate_job.py" \
  --manifests "$SCRATCH/base.yaml" --root "$root" --timeout 240 || fail "the Job did not succeed"

step "render k8s/overlays/replicated and run its Job's pods (--rdzv-endpoint=musterd-replicas:29400)"
kubectl kustomize "$src/k8s/overlays/replicated" >"$SCRATCH/replicated.yaml"
grep -q 'value: musterd-replicas:29400' "$SCRATCH/replicated.yaml" ||
  fail "the replicated Job's agents do not name the headless Service musterd-replicas"
timeout 300 /usr/bin/python3 "$src/tests/deploy/k8s/simulate_job.py" \
  --manifests "$SCRATCH/replicated.yaml" --root "$root" --timeout 240 || fail "the replicated Job did not succeed"

step "a configuration error exits 2 (podFailurePolicy: FailJob)"
expect_exit 2 "$SCRATCH/bad.log" "muster on a bad flag (the Job's podFailurePolicy expects 2)" \
  "$root/usr/bin/muster" --nproc-per-node=many /bin/true
grep -q 'values: \[2\]\|- 2$' "$SCRATCH/base.yaml" || fail "the rendered Job does not fail on exit code 2"
echo "k8s job simulation: ok"
