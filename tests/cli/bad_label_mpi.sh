#!/usr/bin/env bash
# bad_label_mpi.sh MPIEXEC PIPEBENCH JOB: a command line refused under mpirun
# (a bad --label, parsed alike on every rank) is said once, by rank 0, not
# once per rank; the exit is still 2 (issue 66).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$("$1" -np 2 --oversubscribe "$2" run "$3" --dry-run -o "${TMPDIR:-/tmp}/pipebench-bad-label-mpi-$$" --label ../x 2>&1)
rc=$?
[[ $rc -eq 2 ]] || { echo "FAIL: exit $rc, expected 2: $out"; exit 1; }
n=$(grep -c 'a label is one folder name' <<< "$out")
[[ $n -eq 1 ]] || { echo "FAIL: the refusal was printed $n times: $out"; exit 1; }
echo "PASS: refused once: $out"
