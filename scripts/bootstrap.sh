#!/usr/bin/env bash
# Installs the Debian 12 packages pipebench needs (only those missing), then
# configures and builds with the `default` CMake preset. Idempotent: a second
# run installs nothing and rebuilds only what changed. With
# PIPEBENCH_TEST_PACKAGES=1 (scripts/test.sh) it also installs what only the
# tests need: python3-torch, the PyTorch reference of tests/llama.
if [[ ${1:-} == -h || ${1:-} == --help ]]; then source "$(dirname "$0")/../scripts/lib-help.sh"; pipebench_help "$0" "$1"; fi
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  cmake ninja-build g++ pkg-config git python3
  universal-ctags   # tests/lint: function lengths
  libopenmpi-dev openmpi-bin
  libhdf5-dev hdf5-tools python3-h5py
  python3-jsonschema   # tests: every summary.json against docs/summary.schema.json
  libtoml11-dev libcli11-dev libfmt-dev
  libopenblas-dev
  libsleef-dev   # vectorised exp/tanh for the cpu backend's AVX2 kernels (the library PyTorch uses)
  catch2 libbenchmark-dev
  chromium   # the report tests render index.html in headless Chromium
  slurmctld slurmd slurm-client munge   # tests/slurm starts a real single-node cluster
)

[[ ${PIPEBENCH_TEST_PACKAGES:-0} == 1 ]] && PACKAGES+=(python3-torch)

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

if [[ ! -f build/build.ninja ]]; then
  cmake --preset default
fi
cmake --build --preset default
