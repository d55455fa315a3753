#!/usr/bin/env bash
# The main job: set up (scripts/bootstrap.sh), print the plan of
# jobs/default.toml, run it under mpirun with 2 ranks on the cpu backend
# (single-stage baseline vs 2-stage pipeline, real fp32 training), then write
# the report of that run and print where index.html is, then the pipeline's
# decision with its reason as the last line. Extra arguments go to
# `pipebench run` (e.g. --label NAME, --set k=v, --backend sim).
if [[ ${1:-} == -h || ${1:-} == --help ]]; then source "$(dirname "$0")/../scripts/lib-help.sh"; pipebench_help "$0" "$1"; fi
set -euo pipefail
cd "$(dirname "$0")/.."
# The program alone (the tests build with scripts/test.sh); a first build
# compiles the cuda backend only where a GPU is (or PIPEBENCH_CUDA=ON asks).
if [[ -z ${PIPEBENCH_CUDA:-} && ! -f build/build.ninja ]] && ! nvidia-smi -L > /dev/null 2>&1; then
  export PIPEBENCH_CUDA=OFF
fi
PIPEBENCH_BUILD_TARGETS=pipebench bash scripts/bootstrap.sh
echo
build/bench/pipebench plan jobs/default.toml
echo
# Open MPI refuses to run as root unless told; --oversubscribe lets 2 ranks
# start on a 1-core machine.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
mpirun -np 2 --oversubscribe build/bench/pipebench run jobs/default.toml "$@" | tee "$log"
rc=${PIPESTATUS[0]}
set -e
results=$(sed -n 's/^results: //p' "$log" | tail -1)
if [[ -z $results ]]; then
  echo "pipebench: the run wrote no results file (exit $rc)" >&2
  exit "$rc"
fi
echo
build/bench/pipebench report "$results" -o reports/out/default
# The answer last: the pipeline's decision with its reason (from the run).
echo
grep '^decision: ' "$log" || echo "decision: none (the run recorded no pipelined decision; exit $rc)"
exit "$rc"
