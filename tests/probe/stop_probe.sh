#!/usr/bin/env bash
# stop_probe.sh PIPEBENCH JOB SIGNAL: a probe interrupted while a trial runs
# stops that trial's whole process group (launcher and ranks) before it ends,
# instead of leaving them running until the trial timeout.
set -uo pipefail
pipebench=$1 job=$2 sig=$3
here=$(cd "$(dirname "$0")" && pwd)
out=${TMPDIR:-/tmp}/pipebench-stop-probe-$$
# Every trial sleeps 60 s (fake launcher), far below the 600 s trial timeout.
FAKE_SLEEP_AT=1 "$pipebench" probe "$job" --run pipe --lo 1 --hi 4 --trial-timeout 600 \
  --launcher "$here/fake_trial.sh {ranks}" -o "$out" > "$out.log" 2>&1 &
probe=$!
group=""
for _ in $(seq 1 100); do   # the trial's group: the probe's child leads it
  group=$(ps -o pid= --ppid "$probe" | tr -d ' ' | head -1)
  [[ -n $group ]] && pgrep -g "$group" sleep > /dev/null && break
  sleep 0.1
done
[[ -n $group ]] || { echo "FAIL: no trial started: $(cat "$out.log")"; exit 1; }
alive() { ps -eo pid=,pgid=,stat=,args= | awk -v g="$group" '$2 == g && $3 !~ /^Z/'; }
[[ -n $(alive) ]] || { echo "FAIL: cannot see the trial's process group $group"; exit 1; }
kill -"$sig" "$probe"
for _ in $(seq 1 100); do kill -0 "$probe" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$probe" 2>/dev/null; then echo "FAIL: the probe still runs 10 s after SIG$sig"; kill -KILL "$probe"; exit 1; fi
wait "$probe"; rc=$?
sleep 0.5  # live members of the group only: zombies are dead, just not yet reaped by init
if [[ -n $(alive) ]]; then
  echo "FAIL: the trial's process group $group outlived the probe: $(alive)"
  kill -KILL -- -"$group"
  exit 1
fi
grep -q "stopping the running trial" "$out.log" || { echo "FAIL: no message: $(cat "$out.log")"; exit 1; }
rm -rf "$out" "$out.log"
echo "ok: SIG$sig stopped the probe (exit $rc) and its running trial (group $group)"
