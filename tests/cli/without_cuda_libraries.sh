#!/usr/bin/env bash
# A CUDA build on a node without the CUDA runtime and NCCL libraries (issue
# 72, item 6): their folder is hidden under an empty one in a private mount
# namespace (as tests/bundle hides the system's libraries), and pipebench
# still starts — `--version` says NCCL is not loaded and why, `plan` and a
# sim run work, `--backend cuda` ends with exit 7 ("no usable GPU") and a
# results file. Before the fix the dynamic loader refused to start the program
# (libcudart.so.13: cannot open shared object file). Skipped (77) for a build
# without CUDA, or where mount namespaces are not allowed.
#   without_cuda_libraries.sh MPIEXEC PIPEBENCH JOB OUTDIR
set -uo pipefail
mpiexec=$1 pipebench=$(realpath "$2") job=$3 out=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$pipebench" --version | grep -q '^backends:.*cuda' || { echo "SKIP: a build without the cuda backend"; exit 77; }
rm -rf "$out" && mkdir -p "$out/empty"
# The folders the libraries are found in (ldconfig's cache or the toolkit).
dirs=$( (ldconfig -p | sed -n 's/.*\(libnccl\.so\.2\|libcudart\.so\.[0-9]*\) .* => //p'
         ls /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/lib64/libcudart.so.* 2>/dev/null) |
        xargs -r -n1 readlink -f | xargs -r -n1 dirname | sort -u)
[[ -n $dirs ]] || { echo "SKIP: no libnccl or libcudart on this machine to hide"; exit 77; }
unshare -m true 2>/dev/null || { echo "SKIP: no mount namespaces here"; exit 77; }
export pipebench mpiexec job out dirs
unshare -m bash -c '
  for d in $dirs; do mount --bind "$out/empty" "$d" || exit 77; done
  fail() { echo "FAIL: $*"; exit 1; }
  for d in $dirs; do ls "$d"/libnccl.so* "$d"/libcudart.so* > /dev/null 2>&1 && fail "$d still shows the libraries"; done
  echo "hidden: $dirs"
  "$pipebench" --version > "$out/version" 2>&1 || fail "--version: $(cat "$out/version")"
  grep "^NCCL: not loaded: cannot load libnccl.so.2" "$out/version" || fail "--version does not say NCCL is missing: $(cat "$out/version")"
  "$pipebench" plan "$job" > /dev/null || fail "plan"
  "$mpiexec" -np 2 --oversubscribe "$pipebench" run "$job" --backend sim --set train.repeats=2 --set train.warmup=1 \
      -o "$out/sim" > "$out/sim.log" 2>&1 || fail "a sim run: $(tail -3 "$out/sim.log")"
  echo "a sim run: $(grep -c "^results: " "$out/sim.log") results file"
  "$mpiexec" -np 2 --oversubscribe "$pipebench" run "$job" --backend cuda -o "$out/cuda" > "$out/cuda.log" 2>&1
  rc=$?
  [[ $rc -eq 7 ]] || fail "--backend cuda exited $rc, expected 7: $(tail -3 "$out/cuda.log")"
  grep "^pipebench: no usable GPU: " "$out/cuda.log" || fail "no \"no usable GPU\" line"
  grep -q "^results (the failure, kind environment): " "$out/cuda.log" || fail "no results file for the failure"
'
rc=$?
[[ $rc -eq 0 ]] && echo PASS
exit $rc
