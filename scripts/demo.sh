#!/usr/bin/env bash
# The standalone demo: 4 workers of the C++ data-parallel SGD example on this machine, through
# the launcher, each printing what it computed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh muster train
exec build/bin/muster --standalone --nproc-per-node=4 build/bin/train
