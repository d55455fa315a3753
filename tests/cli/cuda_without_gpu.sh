#!/usr/bin/env bash
# `pipebench run --backend cuda` where no GPU can be used (this CI machine:
# no device and no driver; or a build without CUDA) fails fast on every rank
# with exit 7, one line on stderr, and no results file. Skipped (77) where a
# GPU is usable: tests/gpu covers that machine.
#   cuda_without_gpu.sh MPIEXEC PIPEBENCH JOB OUTDIR
set -uo pipefail
mpiexec=$1 pipebench=$2 job=$3 outdir=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "SKIP: a GPU is visible here (nvidia-smi -L); the no-GPU path is checked on machines without one"
  exit 77
fi
rm -rf "$outdir"
mkdir -p "$(dirname "$outdir")"
"$mpiexec" -np 2 --oversubscribe "$pipebench" run "$job" --backend cuda -o "$outdir" >"$outdir.stdout" 2>"$outdir.stderr"
rc=$?
cat "$outdir.stderr"
[[ $rc -eq 7 ]] || { echo "FAIL: exit $rc, expected 7"; exit 1; }
lines=$(grep -c '^pipebench:' "$outdir.stderr")
[[ $lines -eq 1 ]] || { echo "FAIL: $lines 'pipebench:' lines on stderr, expected exactly 1"; exit 1; }
grep -q '^pipebench: no usable GPU: ' "$outdir.stderr" || { echo "FAIL: the line does not start with 'pipebench: no usable GPU: '"; exit 1; }
[[ ! -s $outdir.stdout ]] || { echo "FAIL: something on stdout:"; cat "$outdir.stdout"; exit 1; }
[[ ! -e $outdir ]] || { echo "FAIL: $outdir was created"; exit 1; }
echo PASS
