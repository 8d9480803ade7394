#!/usr/bin/env bash
# The deployment files no test can run here (no container engine, no Slurm): the Dockerfile is
# multi-stage on Debian 12, builds with the README's install script, runs as a numeric non-root
# user and copies only what exists; the sbatch example is valid bash that runs muster under srun
# one task per node.
# usage: files_test.sh SOURCE_DIR
source "$(dirname "$0")/lib.sh"
src=$1
df=$src/deploy/docker/Dockerfile

step "deploy/docker/Dockerfile"
froms=$(grep -E '^FROM ' "$df")
echo "$froms"
[[ $(wc -l <<<"$froms") -ge 2 ]] || fail "not multi-stage"
grep -vqE '^FROM debian:12(-slim)?( AS [a-z]+)?$' <<<"$froms" && fail "a stage is not Debian 12"
grep -q 'bash scripts/install-deps.sh' "$df" || fail "does not use scripts/install-deps.sh"
last_user=$(grep -E '^USER ' "$df" | tail -1 | awk '{print $2}')
[[ $last_user =~ ^[1-9][0-9]*(:[0-9]+)?$ ]] || fail "the final USER ($last_user) is not a numeric non-root uid"
# Every COPY from the build context names something that exists.
while read -r _ from _; do
  [[ $from == --from=* ]] && continue
  [[ $from == . ]] && continue
  [[ -e $src/$from ]] || fail "COPY $from: no such path in the repository"
done < <(grep -E '^COPY ' "$df")
grep -q 'cpack -G DEB' "$df" || fail "the image is not built from the package"
# The manifests run the image's programs as that user.
grep -rq 'runAsUser: 65532' "$src/k8s" && [[ ${last_user%%:*} == 65532 ]] || fail "k8s runAsUser and the image's USER differ"

step "deploy/slurm/muster.sbatch"
sb=$src/deploy/slurm/muster.sbatch
bash -n "$sb" || fail "not valid bash"
grep -q '^#SBATCH --ntasks-per-node=1' "$sb" || fail "no --ntasks-per-node=1"
grep -q '^srun --ntasks-per-node=1' "$sb" || fail "muster is not started by srun, one task per node"
echo "deployment files: ok"
