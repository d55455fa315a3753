#!/usr/bin/env bash
# The device bundle is self-contained: tools/gpu-bundle.sh packs the default
# build; then, in a private mount namespace where the system's Open MPI
# (mpirun, orted, libraries, plugins, help files), PMIx, HDF5, OpenBLAS,
# hwloc and libevent are hidden under empty files and folders, the bundle's
# mpirun runs a 2-rank sim job with pipebench, and plan and report run, with
# only env.sh set (a clean environment otherwise). Skips (77) where unshare
# is not permitted (not root, or no CAP_SYS_ADMIN in a container).
#   check_bundle.sh SOURCE_DIR BUILD_DIR OUT
set -euo pipefail
src=$1 build=$2 out=$3
if ! command -v unshare >/dev/null || ! unshare -m true 2>/dev/null; then
  echo "SKIP: unshare -m is not permitted here (it needs root with CAP_SYS_ADMIN)"
  exit 77
fi
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
bash "$src/tools/gpu-bundle.sh" "$out/bundle" --from-build "$build"

hide_and_run() {
  set -euo pipefail
  mount --make-rprivate /
  local empty_dir empty_file lib=/usr/lib/x86_64-linux-gnu hidden=0
  empty_dir=$(mktemp -d)
  empty_file=$(mktemp)
  for d in "$lib/openmpi" "$lib/pmix2" "$lib/hdf5" "$lib/openblas-pthread" "$lib/blas" "$lib/lapack" /usr/share/openmpi \
           /etc/openmpi; do
    [[ -d $d ]] && mount --bind "$empty_dir" "$d" && hidden=$((hidden + 1))
  done
  for f in "$lib"/{libmpi,libopen-pal,libopen-rte,liboshmem,libpmix,libhdf5,libopenblas,libblas,liblapack,libhwloc,libevent,libmca_common}*.so* \
           /usr/bin/orterun /usr/bin/orted; do
    [[ -f $f && ! -L $f ]] && mount --bind "$empty_file" "$f" && hidden=$((hidden + 1))
  done
  echo "hidden: $hidden system files and folders"
  if /usr/bin/mpirun --version >/dev/null 2>&1; then
    echo "FAIL: the system's mpirun still runs inside the namespace"
    return 1
  fi
  env -i HOME="$HOME" PATH=/usr/bin:/bin TMPDIR=/tmp bash -c '
    set -euo pipefail
    source "$1/bundle/env.sh"
    echo "mpirun: $(command -v mpirun)"
    cd "$2"
    mpirun -np 2 --oversubscribe pipebench run jobs/default.toml --backend sim -n 2 -w 0 -o "$1/results" > "$1/run.log" 2>&1 ||
      { tail -30 "$1/run.log"; exit 1; }
    grep -E "^(single_stage_baseline|two_stage_pipeline) +ok" "$1/run.log"
    pipebench plan jobs/default.toml > "$1/plan.txt"
    pipebench report "$1/results" -o "$1/report" > "$1/report.log"
    grep -q "libmpi.so.40 => $1/bundle/lib/libmpi.so.40" <(ldd "$(command -v pipebench)") ||
      { echo "FAIL: pipebench does not load the bundle'"'"'s libmpi"; ldd "$(command -v pipebench)"; exit 1; }
    echo "ran from the bundle: run, plan, report"
  ' _ "$out" "$src"
}
export -f hide_and_run
export out src
unshare -m bash -c hide_and_run
echo PASS
