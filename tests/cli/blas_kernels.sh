#!/usr/bin/env bash
# blas_kernels.sh PIPEBENCH: OpenBLAS 0.3.21 (Debian 12) falls back to its
# Prescott kernels on CPUs newer than it; pipebench then starts itself again
# with OPENBLAS_CORETYPE set to kernels this CPU runs (SkylakeX with AVX-512,
# Haswell with AVX2 + FMA): 3.7x on the default job. A user's own
# OPENBLAS_CORETYPE is kept.
set -u
pb=$1
own=$(OPENBLAS_CORETYPE=Prescott "$pb" --version | grep '^BLAS:')
grep -q ' Prescott ' <<< "$own" || { echo "FAIL: OPENBLAS_CORETYPE=Prescott was not kept: $own"; exit 1; }
chosen=$(env -u OPENBLAS_CORETYPE "$pb" --version | grep '^BLAS:')
echo "chosen: $chosen"
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  ! grep -q ' Prescott ' <<< "$chosen" || { echo "FAIL: the Prescott kernels on a CPU with AVX2 and FMA: $chosen"; exit 1; }
else
  echo "this CPU has no AVX2 + FMA: nothing to replace"
fi
echo PASS
