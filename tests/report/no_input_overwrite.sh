#!/usr/bin/env bash
# No command writes over or removes one of its own inputs (issue 33:
# `pipebench trace X.h5 -o X.h5` deleted the results file; `tune -o` naming
# its own job overwrote it), whatever the spelling (./X, ../, a symlink); and
# trace's usage errors exit 2 without an MPI rank prefix.
# Usage: no_input_overwrite.sh PIPEBENCH RESULTS.h5 JOB.toml OUT
set -uo pipefail
pipebench=$1 results=$2 job=$3 out=$4
rm -rf "$out" && mkdir -p "$out/sub" && cd "$out" || exit 1
cp "$results" X.h5 && cp "$job" J.toml
ln -s "$out/X.h5" link.json
sum() { md5sum "$1" | cut -d' ' -f1; }
x0=$(sum X.h5) j0=$(sum J.toml)
failures=0
expect() {  # WANT_RC PATTERN_ON_STDERR -- COMMAND...
  local want=$1 pattern=$2; shift 3
  "$@" > cmd.out 2> cmd.err; local rc=$?
  if [[ $rc != "$want" ]] || ! grep -q -- "$pattern" cmd.err || grep -q "rank 0:" cmd.err; then
    echo "FAIL: $* -> exit $rc (want $want), stderr: $(head -2 cmd.err)"; failures=$((failures + 1))
  else
    echo "ok:   $* -> exit $rc: $(head -1 cmd.err)"
  fi
}
expect 2 "refusing to write X.h5: it is the input X.h5" -- "$pipebench" trace X.h5 -o X.h5
expect 2 "refusing to write ./X.h5" -- "$pipebench" trace X.h5 -o ./X.h5
expect 2 "refusing to write sub/../X.h5" -- "$pipebench" trace X.h5 -o sub/../X.h5
expect 2 "refusing to write link.json" -- "$pipebench" trace X.h5 -o link.json
expect 2 "refusing to write ./J.toml: it is the input J.toml" -- "$pipebench" tune J.toml --ranks 2 -o ./J.toml
cp X.h5 index.html  # a results file given by a name the report writes
expect 2 "refusing to write ./index.html: it is the input index.html" -- "$pipebench" report index.html -o .
cmp -s index.html X.h5 || { echo "FAIL: report wrote over its input index.html"; failures=$((failures + 1)); }
expect 2 'no run named "nosuch"' -- "$pipebench" trace X.h5 --run nosuch -o t.json
expect 2 "--step 99999 does not exist" -- "$pipebench" trace X.h5 --step 99999 -o t.json
expect 2 "not a readable HDF5 file" -- "$pipebench" trace J.toml -o t.json
[[ $(sum X.h5) == "$x0" ]] || { echo "FAIL: X.h5 changed"; failures=$((failures + 1)); }
[[ $(sum J.toml) == "$j0" ]] || { echo "FAIL: J.toml changed"; failures=$((failures + 1)); }
[[ -e t.json ]] && { echo "FAIL: t.json written by a refused command"; failures=$((failures + 1)); }
echo "failures: $failures"
((failures == 0))
