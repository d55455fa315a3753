#!/usr/bin/env bash
# The main job: set up (scripts/bootstrap.sh), then plan jobs/default.toml.
# Extra arguments go to `pipebench plan` (e.g. --format json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
echo
exec build/bench/pipebench plan jobs/default.toml "$@"
