#!/usr/bin/env bash
# The nightly report's cost against the history's size, with and without the
# history index (docs/reports.md, "History index"; issue 67). For each N: N
# nights made from one real sim run (build/bench/history_files), then
#   none   pipebench report NEW --history HIST --no-index   (every file read)
#   cold   the same with the index absent (every file read, the index made)
#   warm   a new night NEW2 on the warm index (N rows read, one file parsed)
# Times are wall seconds of the whole command (best of 3 for warm), on this
# machine as it is; the slope of warm over N is the cost per history file.
#   bash bench/whole/history_index.sh [OUT] [N...]    (default /tmp/history_index, 30 100 300 1000 3000)
#   NO_INDEX_MAX=1000: skip the `none` column above this N (it is the slow one)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
pipebench=$here/build/bench/pipebench files=$here/build/bench/history_files
out=${1:-/tmp/history_index}; shift || true
sizes=("$@"); ((${#sizes[@]})) || sizes=(30 100 300 1000 3000)
no_index_max=${NO_INDEX_MAX:-1000}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$out" && mkdir -p "$out"
mpirun -np 2 --oversubscribe "$pipebench" run "$here/tests/data/report/regression.toml" -o "$out/template" > /dev/null
template=$(find "$out/template" -name '*.h5' | head -1)
echo "template: $template ($(stat -c %s "$template") bytes), $(nproc) cores"

# "WALL CPU": wall seconds and CPU seconds (user + system, the crash-check
# children included) of one command; CPU is the steadier figure on a shared machine.
seconds() {
  local t0=$EPOCHREALTIME cpu TIMEFORMAT='%U %S'
  cpu=$( { time "$@" > /dev/null 2>&1; } 2>&1 | awk '{ printf "%.3f", $1 + $2 }')
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v c="$cpu" 'BEGIN { printf "%.3f %s", b - a, c }'
}
best_of_3() {
  local best="999999 0" t
  for _ in 1 2 3; do t=$(seconds "$@"); best=$(awk -v a="$t" -v b="$best" 'BEGIN { split(a, x, " "); split(b, y, " "); print (x[1] < y[1] ? a : b) }'); done
  echo "$best"
}

printf '%7s %17s %17s %17s %12s\n' N "none s (cpu)" "cold s (cpu)" "warm s (cpu)" warm_ms/file
xs=() ys=()
for n in "${sizes[@]}"; do
  hist=$out/$n/history
  "$files" "$template" "$hist/nightly" "$n" 0
  "$files" "$template" "$out/$n/new" 1 "$n"
  "$files" "$template" "$out/$n/new2" 1 $((n + 1))
  none="- -"
  ((n <= no_index_max)) && none=$(seconds "$pipebench" report "$out/$n/new" --history "$hist" --no-index -o "$out/$n/r0")
  rm -f "$hist/.pipebench-index.sqlite"*
  cold=$(seconds "$pipebench" report "$out/$n/new" --history "$hist" -o "$out/$n/r1")
  warm=$(best_of_3 "$pipebench" report "$out/$n/new2" --history "$hist" -o "$out/$n/r2")
  cell() { awk -v v="$1" 'BEGIN { split(v, x, " "); printf "%8s (%6s)", x[1], x[2] }'; }
  printf '%7d %17s %17s %17s %12.4f\n' "$n" "$(cell "$none")" "$(cell "$cold")" "$(cell "$warm")" \
    "$(awk -v w="${warm%% *}" -v n="$n" 'BEGIN { print 1000 * w / n }')"
  xs+=("$n") ys+=("${warm%% *}")
done
# Least-squares slope and intercept of warm over N.
python3 - "${xs[*]}" "${ys[*]}" <<'PY'
import sys
xs = [float(v) for v in sys.argv[1].split()]; ys = [float(v) for v in sys.argv[2].split()]
n = len(xs); mx = sum(xs) / n; my = sum(ys) / n
sxx = sum((x - mx) ** 2 for x in xs)
slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else float("nan")
print(f"warm: {1e3 * slope:.3f} ms per history file (least squares), intercept {my - slope * mx:.3f} s")
PY
