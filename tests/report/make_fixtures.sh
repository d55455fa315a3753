#!/usr/bin/env bash
# Builds the results files the report tests read (ctest fixture "report"):
#   OUT/inputs/   sim runs (every schedule), cpu runs (loss equivalence), an OOM
#                 failure, a hostile description, and one truncated .h5 file
#   OUT/nightly/  three runs of nightly_probe (the history)
#   OUT/slow/     one nightly_probe run on a machine at half speed (sim_load = 2)
#   OUT/same/     one nightly_probe run at the same speed
#   OUT/changed/  one nightly_probe run with micro_batch_size 4: a new series
#   OUT/trial/    one nightly_probe run marked as a probe trial: never trended
#   MPIEXEC PIPEBENCH SRC OUT
set -euo pipefail
mpiexec=$1 pipebench=$2 src=$3 out=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$out"
run() { local np=$1 dest=$2; shift 2; "$mpiexec" -np "$np" --oversubscribe "$pipebench" run -o "$out/$dest" "$@" > /dev/null; }
run 2 inputs "$src/tests/data/runner/schedules.toml" || [[ $? -eq 5 ]]   # its 4-stage runs are skipped on 2 ranks: exit 5
run 2 inputs "$src/tests/data/runner/cpu_equivalence.toml" --run baseline --run p2_1f1b
run 2 inputs "$src/tests/data/runner/failures.toml" --run before --run oom --run after || [[ $? -eq 5 ]]
run 1 inputs "$src/tests/data/report/xss.toml"
# A truncated copy of a real file: the report must skip it with a message.
f=$(find "$out/inputs/runner_schedules" -name '*.h5' | head -1)
head -c 3000 "$f" > "$out/inputs/truncated.h5"
for i in 1 2 3; do run 2 nightly "$src/tests/data/report/regression.toml"; done
run 2 slow "$src/tests/data/report/regression.toml" --set device.sim_load=2
run 2 same "$src/tests/data/report/regression.toml"
run 2 changed "$src/tests/data/report/regression.toml" --set run.pipe.micro_batch_size=4
run 2 trial "$src/tests/data/report/regression.toml" --probe-trial --set device.sim_load=3
echo "fixtures in $out"
