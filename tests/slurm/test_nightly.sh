#!/usr/bin/env bash
# End-to-end on a real single-node Slurm cluster (ctest label slurm):
# start the cluster, run slurm/nightly.sh on a sim and a cpu workload plus
# one that fails on purpose, wait for every job by polling squeue, check the
# results and the report, run slurm/pipebench.sbatch directly with 4 tasks,
# then stop the cluster and check that no slurm or munge process is left.
#   test_nightly.sh SRC_DIR WORK_DIR PIPEBENCH
set -euo pipefail
src=$1 work=$2 pipebench=$3
cluster=$work/cluster
rm -rf "$work"
mkdir -p "$work"
cleanup() { "$src/tests/slurm/cluster.sh" stop "$cluster" || true; }
trap cleanup EXIT
# Its exports (SLURM_CONF); a cluster that did not start fails here, with why, not at the first sbatch.
exports=$("$src/tests/slurm/cluster.sh" start "$cluster") || { echo "FAIL: the test cluster did not start"; exit 1; }
eval "$exports"
export PIPEBENCH=$pipebench

wait_for_jobs() {  # poll squeue (sbatch --wait polls slowly) until these jobs are gone
  for _ in $(seq 600); do
    [[ -z $(squeue -h -j "$(IFS=,; echo "$*")" 2>/dev/null) ]] && return 0
    sleep 0.5
  done
  echo "FAIL: jobs $* still queued"; squeue; return 1
}

cd "$src"
date=$(date -u +%Y%m%d)
out=$(slurm/nightly.sh jobs/nightly/sim_pipeline.toml jobs/nightly/cpu_pipeline.toml tests/data/slurm/undersized.toml \
        --results "$work/results" --reports "$work/reports" --date "$date")
echo "$out"
workload_ids=$(sed -n 's/^workload jobs: //p' <<<"$out")
report_id=$(sed -n 's/^report job: //p' <<<"$out")
# shellcheck disable=SC2086
wait_for_jobs $workload_ids "$report_id"
times() { for j in "$@"; do scontrol show job "$j" | grep -oE "(JobState|StartTime|EndTime|ExitCode)=\S+" | tr '\n' ' '; echo "JobId=$j"; done; }
# shellcheck disable=SC2086
times $workload_ids "$report_id" > "$work/jobs.txt"
cat "$work/jobs.txt"

# slurm/pipebench.sbatch directly, 4 tasks.
direct=$(sbatch --parsable --ntasks=4 --output="$work/direct-%j.out" --export=ALL,RESULTS_DIR="$work/direct" \
           slurm/pipebench.sbatch tests/data/runner/schedules.toml)
direct=${direct%%;*}
wait_for_jobs "$direct"
times "$direct" >> "$work/jobs.txt"
cat "$work/direct-$direct.out" | tail -5

/usr/bin/python3 "$src/tests/slurm/check_nightly.py" "$work" "$date" "$report_id" "$direct" $workload_ids

cleanup
trap - EXIT
left=$(ps -eo comm= | grep -E '^(slurmctld|slurmd|slurmstepd|munged)$' || true)
[[ -z $left ]] || { echo "FAIL: processes left after stopping the cluster: $left"; exit 1; }
echo "PASS: cluster stopped, no slurm or munge process left"
