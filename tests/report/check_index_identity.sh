#!/usr/bin/env bash
# The existing report tests' commands (report.regression, no_change,
# new_series, probe_trial_not_trended) on a private copy of the fixtures,
# each with --no-index, then with a cold and a warm history index:
# summary.json identical but for generated_utc (issue 67).
#   check_index_identity.sh PIPEBENCH FIXTURES OUT
set -uo pipefail
pipebench=$(realpath "$1") fix=$2 out=$3
rm -rf "$out" && mkdir -p "$out" && cp -a "$fix"/{nightly,slow,same,changed,trial} "$out"/
rm -f "$out"/*/.pipebench-index.sqlite*
cd "$out" || exit 1
strip() { [[ -f $1/summary.json ]] && sed '/"generated_utc"/d' "$1/summary.json" || echo "no $1/summary.json"; }
failures=0
for case in "slow --history nightly" "same --history nightly" "changed --history nightly" \
            "same --history nightly --history trial"; do
  name=$(echo "$case" | tr -c 'a-z\n' _)
  # shellcheck disable=SC2086  # the case's words are arguments
  "$pipebench" report $case -o "$name.none" --no-index > /dev/null 2>&1
  for pass in cold warm; do
    # shellcheck disable=SC2086
    "$pipebench" report $case -o "$name.$pass" > /dev/null 2> "$name.$pass.err"
    if [[ -f $name.none/summary.json ]] && cmp -s <(strip "$name.none") <(strip "$name.$pass"); then
      echo "ok   $case ($pass: $(grep -o '[0-9]* history file(s) from it, [0-9]* read' "$name.$pass.err"))"
    else
      echo "FAIL $case ($pass): summary.json differs"; diff <(strip "$name.none") <(strip "$name.$pass") | head -5
      failures=$((failures + 1))
    fi
  done
  rm -f nightly/.pipebench-index.sqlite*   # the next case starts cold again
done
exit $((failures > 0))
