#!/usr/bin/env bash
# Installs the Debian 12 packages pipebench needs (only those missing), then
# configures and builds with the `default` CMake preset. Idempotent: a second
# run installs nothing and rebuilds only what changed. With
# PIPEBENCH_TEST_PACKAGES=1 (scripts/test.sh) it also installs what only the
# tests need (Catch2, Google Benchmark, Chromium, Slurm, PyTorch, ...).
# PIPEBENCH_BUILD_TARGETS="a b" builds only those targets; PIPEBENCH_CUDA=AUTO|ON|OFF
# configures the cuda backend so.
if [[ ${1:-} == -h || ${1:-} == --help ]]; then source "$(dirname "$0")/../scripts/lib-help.sh"; pipebench_help "$0" "$1"; fi
set -euo pipefail
cd "$(dirname "$0")/.."

# What the main job needs: build, run, report.
PACKAGES=(
  cmake ninja-build g++ pkg-config git python3
  libopenmpi-dev openmpi-bin
  libhdf5-dev hdf5-tools   # h5dump: the README reads results files with it
  libtoml11-dev libcli11-dev libfmt-dev
  libopenblas-dev
  libsqlite3-dev   # the report's history index (an embedded database, no server)
  libsleef-dev   # vectorised exp/tanh for the cpu backend's AVX2 kernels (the library PyTorch uses)
)
# What only the tests need (PIPEBENCH_TEST_PACKAGES=1, scripts/test.sh): a
# first main job does not wait for a browser, a Slurm cluster or PyTorch.
TEST_PACKAGES=(
  universal-ctags   # tests/lint: function lengths
  python3-h5py
  python3-jsonschema   # tests: every summary.json against docs/summary.schema.json
  catch2 libbenchmark-dev
  chromium   # the report tests render index.html in headless Chromium
  slurmctld slurmd slurm-client munge   # tests/slurm starts a real single-node cluster
  python3-torch   # tests/llama's reference
)

[[ ${PIPEBENCH_TEST_PACKAGES:-0} == 1 ]] && PACKAGES+=("${TEST_PACKAGES[@]}")

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "pipebench: installing missing packages: ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "pipebench: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Configure once; again after packages were installed (the tests' Catch2
# and Google Benchmark, found now, add their targets), and when PIPEBENCH_CUDA
# (AUTO | ON | OFF: the cuda backend, docs/cuda-backend.md) asks for another
# value than the build has.
cuda_args=()
if [[ -n ${PIPEBENCH_CUDA:-} ]]; then
  cuda_args=(-DPIPEBENCH_CUDA="$PIPEBENCH_CUDA")
  had=$(sed -n 's/^PIPEBENCH_CUDA:STRING=//p' build/CMakeCache.txt 2>/dev/null || true)
  [[ $had == "$PIPEBENCH_CUDA" ]] || rm -f build/build.ninja
fi
if [[ ! -f build/build.ninja ]] || ((${#missing[@]})); then
  cmake --preset default "${cuda_args[@]}"
fi
# PIPEBENCH_BUILD_TARGETS: only these (scripts/main-job.sh: pipebench alone,
# not every test and micro-benchmark); else everything.
if [[ -n ${PIPEBENCH_BUILD_TARGETS:-} ]]; then
  # shellcheck disable=SC2086  # a list of target names
  cmake --build --preset default --target ${PIPEBENCH_BUILD_TARGETS}
else
  cmake --build --preset default
fi
