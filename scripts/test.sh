#!/usr/bin/env bash
# The whole test suite: set up (scripts/bootstrap.sh), then every ctest test.
# Extra arguments go to ctest (e.g. -L unit, -LE slow, -R partition).
if [[ ${1:-} == -h || ${1:-} == --help ]]; then source "$(dirname "$0")/../scripts/lib-help.sh"; pipebench_help "$0" "$1"; fi
set -euo pipefail
cd "$(dirname "$0")/.."
# Everything, the cuda backend included where nvcc, cuBLAS and NCCL are
# (PIPEBENCH_CUDA=AUTO: CI compiles it even without a GPU).
PIPEBENCH_CUDA=${PIPEBENCH_CUDA:-AUTO} PIPEBENCH_TEST_PACKAGES=1 bash scripts/bootstrap.sh   # also python3-torch (tests/llama's reference)
# Open MPI refuses to run as root unless told; tests oversubscribe 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec ctest --preset default -j "$(nproc)" "$@"
