#!/usr/bin/env bash
# Nightly pipeline: submit every workload of the nightly list as its own
# batch job (slurm/pipebench.sbatch, as many tasks as its largest run has
# stages), then one report job that runs after all of them, whatever their
# outcome (--dependency=afterany, --kill-on-invalid-dep=yes), and writes
# reports/nightly/<date>/ with history from earlier nights and
# --fail-on-regression. Prints the job ids.
#
#   slurm/nightly.sh                         # jobs/nightly/*.toml
#   slurm/nightly.sh jobs/a.toml jobs/b.toml # or these workloads
#   slurm/nightly.sh --list nightly.txt      # or the paths listed in a file
# Options: --results DIR (default results), --reports DIR (default reports/nightly),
#          --date YYYYMMDD (default today, UTC), --sbatch "ARGS" (e.g. "--partition=gpu --time=01:00:00"),
#          --references FILE (per-system expected figures, docs/reproduce.md; default references.toml
#          when the repository has one: the report judges every run against it)
# Environment: PIPEBENCH (default build/bench/pipebench).
set -euo pipefail
cd "$(dirname "$0")/.."
results=results reports=reports/nightly date=$(date -u +%Y%m%d) extra="" jobs=() references=""
[[ -f references.toml ]] && references=references.toml
while (($#)); do
  case $1 in
    --list) mapfile -t -O "${#jobs[@]}" jobs < <(grep -v '^\s*\(#\|$\)' "$2"); shift 2 ;;
    --results) results=$2; shift 2 ;;
    --reports) reports=$2; shift 2 ;;
    --date) date=$2; shift 2 ;;
    --sbatch) extra=$2; shift 2 ;;
    --references) references=$2; shift 2 ;;
    -h|--help) source "$(dirname "$0")/../scripts/lib-help.sh"; pipebench_help "$0" --help ;;
    *) jobs+=("$1"); shift ;;
  esac
done
((${#jobs[@]})) || jobs=(jobs/nightly/*.toml)
pipebench=${PIPEBENCH:-build/bench/pipebench}
label=nightly-$date
mkdir -p "$reports/$date/logs"

ids=() inputs=() expect=()
for job in "${jobs[@]}"; do
  # The job's name and its largest run, from the planner (also validates the workload now).
  read -r name ntasks < <("$pipebench" plan "$job" --format json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["job"], max(r.get("ranks", r["pipeline_size"]) for r in d["runs"]))')
  # shellcheck disable=SC2086
  id=$(sbatch --parsable --job-name="nightly-$name" --ntasks="$ntasks" $extra \
         --output="$reports/$date/logs/%x-%j.out" --export=ALL,RESULTS_DIR="$results" \
         slurm/pipebench.sbatch "$job" --label "$label")
  id=${id%%;*}
  echo "submitted $job as job $id ($ntasks tasks)"
  ids+=("$id") inputs+=("$results/$name/$label") expect+=(--expect "$name")
done

dependency=$(IFS=:; echo "afterany:${ids[*]}")
report_cmd="$pipebench report ${inputs[*]} --history $results ${expect[*]} -o $reports/$date --fail-on-regression"
[[ -z $references ]] || report_cmd+=" --references $references"
# shellcheck disable=SC2086
rid=$(sbatch --parsable --job-name=nightly-report --ntasks=1 $extra --dependency="$dependency" --kill-on-invalid-dep=yes \
        --output="$reports/$date/logs/%x-%j.out" --wrap="$report_cmd")
rid=${rid%%;*}
echo "submitted the report as job $rid (after ${ids[*]})"
echo "workload jobs: ${ids[*]}"
echo "report job: $rid"
echo "report: $reports/$date/index.html"
