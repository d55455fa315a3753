#!/usr/bin/env bash
# tuned_layout.sh MPIEXEC PIPEBENCH PYTHON CHECK_VIRTUAL OUT JOB NGPUS GLOBAL_BATCH
# The layout question end to end (issue 38, docs/tune.md): `tune --gpus N`
# on JOB (a preset job on the sim backend's virtual clock), then the chosen
# run on N oversubscribed ranks, then check_virtual_clock.py: the measured
# step is the plan's iteration_s and tune's predicted step, every rank's busy,
# all-reduce and tensor-parallel time the plan's.
set -euo pipefail
mpiexec=$1 pipebench=$2 python=$3 check=$4 out=$5 job=$6 gpus=$7 batch=$8
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$out" && mkdir -p "$out"
"$pipebench" tune "$job" --gpus "$gpus" --gpus-per-node 8 --global-batch "$batch" -o "$out/tuned.toml" > "$out/tune.txt"
run=$(sed -n 's/^name = "\(tuned_[^"]*\)"$/\1/p' "$out/tuned.toml" | head -1)
predicted=$(sed -n "s/.*chosen: best predicted throughput on $gpus ranks (\([0-9.e+]*\) samples\/s.*/\1/p" "$out/tuned.toml")
echo "tune chose $run ($predicted samples/s predicted)"
"$mpiexec" -np "$gpus" --oversubscribe "$pipebench" run "$out/tuned.toml" --run "$run" --set train.repeats=2 \
  -o "$out/results" > "$out/run.txt" 2>&1 || { tail -20 "$out/run.txt"; exit 1; }
"$python" "$check" "$pipebench" "$out/tuned.toml" --run "$run" "$out"/results/*/*.h5
