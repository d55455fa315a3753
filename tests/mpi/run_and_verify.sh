#!/usr/bin/env bash
# Runs `pipebench run` under mpirun, checks its exit code, then checks the
# results file it wrote with verify_results (and optional extra checkers).
#   run_and_verify.sh MPIEXEC PIPEBENCH VERIFY NP JOB OUTDIR EXPECTED_RC [RUN ARGS...] -- [VERIFY ARGS...] [-- CHECKER...]
set -uo pipefail
mpiexec=$1 pipebench=$2 verify=$3 np=$4 job=$5 outdir=$6 expected_rc=$7
shift 7
run_args=() verify_args=() checker=()
while (($#)) && [[ $1 != -- ]]; do run_args+=("$1"); shift; done
(($#)) && shift
while (($#)) && [[ $1 != -- ]]; do verify_args+=("$1"); shift; done
(($#)) && shift
checker=("$@")

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
rm -rf "$outdir"
env_args=()
[[ -n ${PIPEBENCH_FAULT:-} ]] && env_args=(-x PIPEBENCH_FAULT)
"$mpiexec" -np "$np" --oversubscribe "${env_args[@]}" "$pipebench" run "$job" -o "$outdir" "${run_args[@]}"
rc=$?
if [[ $rc -ne $expected_rc ]]; then
  echo "FAIL: pipebench run exited $rc, expected $expected_rc"
  exit 1
fi
mapfile -t files < <(find "$outdir" -name '*.h5' | sort)
if [[ ${#files[@]} -ne 1 ]]; then
  echo "FAIL: expected exactly one results file under $outdir, found ${#files[@]}: ${files[*]}"
  exit 1
fi
leftover=$(find "$outdir" -name '*.partial' -o -name '*.partial.tmp' -o -name '*.tmp-*')
if [[ -n $leftover ]]; then
  echo "FAIL: a checkpoint or temporary file was left behind: $leftover"
  exit 1
fi
"$verify" "${files[0]}" "$job" "$np" "${verify_args[@]}" || exit 1
if ((${#checker[@]})); then
  "${checker[@]}" "${files[0]}" || exit 1
fi
echo "PASS"
