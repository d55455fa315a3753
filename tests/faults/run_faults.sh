#!/usr/bin/env bash
# The fault table (docs/runner.md, "Interrupted launches"): a two-run job
# (tests/data/faults/two_runs.toml, 2 ranks, sim backend) is hit during its
# second run, and each row checks what is left: completed runs kept in a
# valid file, no hang, the exit code. Rerun by hand:
#   bash tests/faults/run_faults.sh build/bench/pipebench mpirun /tmp/faults [SCENARIO...]
# Scenarios: sigterm_mpirun sigint_mpirun sigusr1_mpirun sigkill_rank1
# sigkill_rank0 sigstop_rank1 sigstop_rank0 full_folder read_only_folder
# dp_sigkill_replica dp_sigstop_in_sync tp_sigstop_peer (default: all). The dp_ rows run
# tests/data/faults/dp_two_runs.toml (2 stages x 2 replicas, 4 ranks) instead, the tp_ row
# tests/data/faults/tp_two_runs.toml (cpu, t = 2 on 2 ranks). The two folder
# rows mount a small tmpfs and are skipped where mounting is not allowed.
set -uo pipefail
pipebench=$(realpath "$1") mpiexec=$2 out=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
job=$here/../data/faults/two_runs.toml np=2
py=/usr/bin/python3   # Debian's, with h5py
scenarios=("$@")
((${#scenarios[@]})) || scenarios=(sigterm_mpirun sigint_mpirun sigusr1_mpirun sigkill_rank1 sigkill_rank0 sigstop_rank1 sigstop_rank0 full_folder read_only_folder dp_sigkill_replica dp_sigstop_in_sync tp_sigstop_peer)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
rm -rf "$out" && mkdir -p "$out"

# The stopped-rank rows spend ~15 s each waiting out the step timeout and the
# settle (wall-clock deadlines, not work): with all scenarios (no arguments)
# each runs at once as its own invocation under OUT/concurrent/, beside the
# others here, and its row joins the table at the end.
concurrent=()
if (($# == 0)); then
  for s in sigstop_rank1 sigstop_rank0 dp_sigstop_in_sync tp_sigstop_peer; do
    bash "$0" "$pipebench" "$mpiexec" "$out/concurrent/$s" "$s" > "$out/$s.table" 2>&1 &
    concurrent+=("$s:$!")
  done
  mapfile -t scenarios < <(printf '%s\n' "${scenarios[@]}" | grep -vx -e sigstop_rank1 -e sigstop_rank0 -e dp_sigstop_in_sync -e tp_sigstop_peer)
fi

HANG_S=60  # a launch still alive this long after the fault counts as a hang
launch_pid="" log="" rows=() failures=0 mounts=() stopped=""
cleanup() {
  for c in "${concurrent[@]}"; do kill "${c#*:}" 2>/dev/null; done
  [[ -n $stopped ]] && kill -KILL "$stopped" 2>/dev/null
  [[ -n $launch_pid ]] && kill -KILL "$launch_pid" 2>/dev/null
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
}
trap cleanup EXIT

# start DIR: the job in the background writing under DIR; sets launch_pid,
# log (OUT/<scenario>.log, outside DIR, which may be read-only or full).
start() {
  log=$out/$s.log
  "$mpiexec" -np "$np" --oversubscribe "$pipebench" run "$job" -o "$1" > "$log" 2>&1 &
  launch_pid=$!
}
# Waits until the second run is under way (its first step printed).
wait_second_run() {
  for _ in $(seq 1 300); do
    grep -q '\[second\] step 1/' "$log" && return 0
    kill -0 "$launch_pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# Starts the job under DIR and waits for its second run (a FAIL row when it never comes).
start_second_run() {
  start "$1"
  wait_second_run && return 0
  row "$s" FAIL "the second run never started: $(tail -2 "$log")"
  return 1
}
# Sends SIG to world rank R; sets `stopped` to its pid for SIGSTOP (a FAIL row when not found).
hit_rank() {
  local pid
  pid=$(rank_pid "$2")
  [[ -n $pid ]] || { row "$s" FAIL "rank $2 not found"; return 1; }
  [[ $1 == STOP ]] && stopped=$pid
  kill -"$1" "$pid"
}
# The pid of world rank R among mpirun's children.
rank_pid() {
  local p
  for p in $(ps -o pid= --ppid "$launch_pid"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then echo "$p"; return; fi
  done
}
# Waits for the launch to end; sets rc to its exit code, or "hang" after HANG_S.
finish() {
  for _ in $(seq 1 $((HANG_S * 10))); do
    if ! kill -0 "$launch_pid" 2>/dev/null; then
      wait "$launch_pid"; rc=$?; launch_pid=""; return
    fi
    sleep 0.1
  done
  kill -KILL "$launch_pid" 2>/dev/null; wait "$launch_pid" 2>/dev/null; launch_pid=""
  rc=hang
}
# World rank 1 stopped DELAY s after the second run's first progress line,
# the launch waited for, the row of what it kept and how long it took.
stop_in_second_run() {  # DELAY
  start_second_run "$dir" || return 0
  sleep "$1"
  hit_rank STOP 1 || return 0
  local t0=$SECONDS
  finish
  kill -KILL "$stopped" 2>/dev/null; stopped=""
  check_kept "$s" "$dir" "$rc" .h5
  rows[-1]="${rows[-1]} (ended $((SECONDS - t0)) s after SIGSTOP)"
}
row() {  # NAME RESULT DETAIL
  rows+=("$(printf '%-18s %-5s %s' "$1" "$2" "$3")")
  [[ $2 == FAIL ]] && failures=$((failures + 1))
}
# The row for a launch that should leave DIR/<job>/*.h5 (or *.h5.partial).
check_kept() {  # NAME DIR RC SUFFIX
  local name=$1 dir=$2 rc=$3 suffix=$4 files verdict
  [[ $rc == hang ]] && { row "$name" FAIL "hang: still running ${HANG_S}s after the fault"; return; }
  [[ $rc == 0 ]] && { row "$name" FAIL "exit 0 for an interrupted launch"; return; }
  # A rank 0 killed outright leaves its name claim (NAME.h5.claim) and, killed
  # inside a checkpoint write, the half-written NAME.h5.partial.tmp beside the
  # checkpoint: neither is a results file (report reads only .h5 and .h5.partial).
  # Killed between publishing's link() and unlink(), NAME.h5 and NAME.h5.partial
  # are one file under two names (one inode; report reads it once).
  mapfile -t files < <(find "$dir" -name "*$suffix" ! -name '*.claim' ! -name '*.tmp' -printf '%i %p\n' | sort -u -k1,1 | cut -d' ' -f2-)
  if ((${#files[@]} != 1)); then
    row "$name" FAIL "exit $rc; expected one *$suffix, found ${#files[@]}: $(find "$dir" -name '*.h5*' -printf '%f ' )"
    return
  fi
  verdict=$("$py" "$here/check_interrupted.py" "${files[0]}")
  [[ $verdict == FAIL* ]] && { row "$name" FAIL "exit $rc; $verdict"; return; }
  row "$name" ok "exit $rc; ${files[0]#"$out"/} $verdict"
}

for s in "${scenarios[@]}"; do
  dir=$out/$s
  job=$here/../data/faults/two_runs.toml np=2
  [[ $s == dp_* ]] && job=$here/../data/faults/dp_two_runs.toml np=4
  [[ $s == tp_* ]] && job=$here/../data/faults/tp_two_runs.toml np=2
  case $s in
    sigterm_mpirun | sigint_mpirun | sigusr1_mpirun)
      sig=${s%_mpirun}; sig=${sig#sig}
      start_second_run "$dir" || continue
      kill -"${sig^^}" "$launch_pid"
      finish
      check_kept "$s" "$dir" "$rc" .h5
      ;;
    sigkill_rank1 | sigkill_rank0)
      start_second_run "$dir" && hit_rank KILL "${s#sigkill_rank}" || continue
      finish
      if [[ $s == sigkill_rank1 ]]; then
        check_kept "$s" "$dir" "$rc" .h5
      else
        # Nothing could publish: the checkpoint stays, and report reads it.
        check_kept "$s" "$dir" "$rc" .h5.partial
        if "$pipebench" report "$dir" -o "$dir/report" > /dev/null 2>&1 &&
           grep -q '"launch_status": "incomplete"' "$dir/report/summary.json"; then
          row "  report of it" ok "reads the .h5.partial, shows launch INCOMPLETE"
        else
          row "  report of it" FAIL "report did not read the checkpoint as incomplete"
        fi
      fi
      ;;
    sigstop_rank1 | sigstop_rank0)
      # A stopped rank never answers: the others time the step out
      # (step_timeout_s = 5 s), wait kSettleTimeoutS = 10 s more, and end.
      start_second_run "$dir" && hit_rank STOP "${s#sigstop_rank}" || continue
      t0=$SECONDS
      finish
      kill -KILL "$stopped" 2>/dev/null; stopped=""
      if [[ $s == sigstop_rank1 ]]; then
        check_kept "$s" "$dir" "$rc" .h5
      else
        # Rank 0 itself is stopped: mpirun's SIGCONT + SIGTERM usually lets it
        # publish (.h5); where it cannot, its last checkpoint stays (.h5.partial).
        check_kept "$s" "$dir" "$rc" '.h5*'
      fi
      rows[-1]="${rows[-1]} (ended $((SECONDS - t0)) s after SIGSTOP)"
      ;;
    dp_sigkill_replica)
      # World rank 3: stage 1 of replica 1 (tp-dp-pp), killed during the second run.
      # mpirun then sends rank 0 SIGTERM and, odls_base_sigkill_timeout (1 s)
      # later, SIGKILL: with 4 oversubscribed ranks on a loaded machine rank 0
      # may not run its handler in time (seen once in CI), and its last
      # checkpoint (.h5.partial, a valid file) keeps the completed run instead.
      start_second_run "$dir" && hit_rank KILL 3 || continue
      finish
      check_kept "$s" "$dir" "$rc" '.h5*'
      ;;
    dp_sigstop_in_sync)
      # World rank 1 (stage 0 of replica 1) stopped 0.4 s after a step's
      # progress line: in the next step's gradient all-reduce, which runs from
      # ~33 ms to ~970 ms into the step (pipebench plan). Its data-parallel peer
      # times the wait out (step_timeout_s = 5 s), the others the step; the settle
      # gives up after kSettleTimeoutS and the launch ends.
      stop_in_second_run 0.4
      ;;
    tp_sigstop_peer)
      # World rank 1 (tensor rank 1 of the only stage) stopped 0.2 s after a
      # step's progress line: its tensor peer blocks in the next all-reduce of
      # a block, times the wait out (step_timeout_s = 5 s), and the settle
      # gives up after kSettleTimeoutS; the first run is kept.
      stop_in_second_run 0.2
      ;;
    full_folder)
      mkdir -p "$dir/fs"
      if ! mount -t tmpfs -o size=2m tmpfs "$dir/fs" 2>/dev/null; then row "$s" skip "cannot mount a tmpfs here"; continue; fi
      mounts+=("$dir/fs")
      start_second_run "$dir/fs" || continue
      dd if=/dev/zero of="$dir/fs/filler" bs=64k 2> /dev/null   # until ENOSPC
      finish
      partial=$(find "$dir/fs" -name '*.h5.partial' | head -1)
      if [[ $rc == hang || $rc == 0 ]]; then
        row "$s" FAIL "exit $rc"
      elif ! grep -q 'No space left on device' "$log"; then
        row "$s" FAIL "exit $rc; no 'No space left on device' in: $(grep pipebench: "$log" | tail -1)"
      elif [[ -z $partial ]]; then
        row "$s" FAIL "exit $rc; the checkpoint with the first run is missing"
      # The first run kept; the second's record an error with the OS reason, not a signal's interruption.
      elif verdict=$("$py" "$here/check_interrupted.py" "$partial" error "No space left on device"); [[ $verdict == FAIL* ]]; then
        row "$s" FAIL "exit $rc; $verdict"
      else
        row "$s" ok "exit $rc; $(grep -o 'cannot write results.*' "$log" | head -1 | sed "s#$out/##"); first run kept in the checkpoint"
      fi
      ;;
    read_only_folder)
      mkdir -p "$dir/fs"
      if ! mount -t tmpfs -o ro,size=1m tmpfs "$dir/fs" 2>/dev/null; then row "$s" skip "cannot mount a tmpfs here"; continue; fi
      mounts+=("$dir/fs")
      start "$dir/fs/results"
      finish
      if [[ $rc == hang || $rc == 0 ]]; then
        row "$s" FAIL "exit $rc"
      elif grep -q '== run first' "$log"; then
        row "$s" FAIL "exit $rc, but a run started before the folder was checked"
      elif ! grep -q "$dir/fs/results.*Read-only file system" "$log"; then
        row "$s" FAIL "exit $rc; message lacks the path or the OS reason: $(grep pipebench: "$log" | head -1)"
      else
        row "$s" ok "exit $rc before any run; $(grep -o 'cannot create results folder.*' "$log" | head -1 | sed "s#$out/##")"
      fi
      ;;
    *) row "$s" FAIL "unknown scenario" ;;
  esac
done

for c in "${concurrent[@]}"; do
  s=${c%%:*}
  wait "${c#*:}"; crc=$?
  mapfile -t got < <(grep -E "^$s |^  " "$out/$s.table")
  ((${#got[@]})) && rows+=("${got[@]}")
  if ((crc != 0)) || ! ((${#got[@]})); then
    failures=$((failures + 1))
    ((${#got[@]})) || row "$s" FAIL "exit $crc, no row: $(tail -3 "$out/$s.table" | tr '\n' ' ')"
  fi
done
printf '%-18s %-5s %s\n' scenario result detail
printf '%s\n' "${rows[@]}"
exit $((failures > 0))
