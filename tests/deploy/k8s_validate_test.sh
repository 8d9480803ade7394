#!/usr/bin/env bash
# The Kubernetes manifests: every kustomization under k8s/ (found, not listed: a new one cannot
# be missed) renders with `kubectl kustomize`, and every object validates offline against the
# Kubernetes OpenAPI schema, strict about unknown fields, and against muster's rules
# (k8s/validate.mjs), replicated musterd and its etcd StatefulSet included. Broken renderings (k8s/bad/) must be
# rejected with the expected message, so the validator is known to bite.
# Needs kubectl, node and npm; the validator's npm packages (pinned by k8s/package-lock.json)
# are installed under the build directory from the npm registry on first use.
# usage: k8s_validate_test.sh SOURCE_DIR BUILD_DIR
source "$(dirname "$0")/lib.sh"
src=$1 build=$2
here=$src/tests/deploy/k8s
command -v kubectl >/dev/null || skip "kubectl not found: the manifests cannot be rendered here"
command -v node >/dev/null || skip "node not found (Debian package nodejs): the manifests are not validated"
command -v npm >/dev/null || skip "npm not found (Debian package npm): the manifests are not validated"
scratch

step "render every kustomization (kubectl $(kubectl version --client 2>/dev/null | head -1))"
rendered=()
mapfile -t dirs < <(cd "$src/k8s" && find . -name kustomization.yaml -printf '%h\n' | sed 's#^\./##' | sort)
for want in musterd job base overlays/gpu overlays/tls jobset pytorchjob \
  etcd musterd-replicated overlays/replicated overlays/replicated-existing-etcd; do
  printf '%s\n' "${dirs[@]}" | grep -qx "$want" || fail "k8s/$want/kustomization.yaml is missing"
done
for dir in "${dirs[@]}"; do
  file=$SCRATCH/$(tr / - <<<"$dir").yaml
  kubectl kustomize "$src/k8s/$dir" >"$file" 2>"$SCRATCH/err" || { cat "$SCRATCH/err"; fail "kubectl kustomize k8s/$dir"; }
  echo "k8s/$dir: $(grep -c '^kind:' "$file") object(s)"
  rendered+=("$file")
done

step "the validator's packages (npm ci, pinned)"
node_dir=$build/deploy-k8s-validate
npm_ci_pinned "$here" "$node_dir" "the manifests rendered but are not validated"
cp "$here/validate.mjs" "$node_dir/validate.mjs"

step "validate"
node "$node_dir/validate.mjs" "${rendered[@]}" || fail "the manifests are not valid"

step "broken renderings are rejected"
for bad in "$here"/bad/*.yaml; do
  expect=$(head -1 "$bad" | sed 's/.*must say: //')
  if out=$(node "$node_dir/validate.mjs" "$bad" 2>&1); then
    fail "$(basename "$bad") passed validation; expected: $expect"
  fi
  grep -qF -- "$expect" <<<"$out" || { echo "$out"; fail "$(basename "$bad"): expected '$expect'"; }
  echo "rejected $(basename "$bad"): $expect"
done
echo "k8s manifests: ok"
