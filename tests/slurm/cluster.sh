#!/usr/bin/env bash
# A real single-node Slurm cluster for the tests, entirely under one folder:
#   cluster.sh start DIR   install missing packages, write DIR/slurm.conf, start
#                          munged (as the munge user), slurmctld and slurmd, wait
#                          until the node is idle; prints `export SLURM_CONF=...`
#   cluster.sh stop DIR    stop them by their PID files (never by name), wait
#                          until they are gone
# Everything (state, logs, PID files) lives in DIR but munged's key, socket
# and PID file: munged runs as the munge user, who may not enter DIR (a clone
# under /root, mode 0700, failed with "Permission denied" on its log file),
# so they live in a folder of their own under /tmp, named in DIR/munge.dir
# and removed by stop.
set -euo pipefail
cmd=${1:?start|stop} dir=${2:?DIR}

stop_pidfile() {  # SIGTERM, wait up to 15 s, then SIGKILL
  local f=$1 pid
  [[ -f $f ]] || return 0
  pid=$(cat "$f" 2>/dev/null || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

if [[ $cmd == stop ]]; then
  stop_pidfile "$dir/slurmd.pid"
  stop_pidfile "$dir/slurmctld.pid"
  if [[ -f $dir/munge.dir ]]; then
    mdir=$(cat "$dir/munge.dir")
    stop_pidfile "$mdir/munged.pid"
    [[ $mdir == /tmp/pipebench-munge.* ]] && rm -rf "$mdir"
    rm -f "$dir/munge.dir"
  fi
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { echo "cluster.sh: needs root (slurmd runs jobs as their users)" >&2; exit 1; }
missing=()
for p in slurmctld slurmd slurm-client munge; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

mkdir -p "$dir"/{state,spool,logs}
dir=$(cd "$dir" && pwd)
mdir=$(mktemp -d /tmp/pipebench-munge.XXXXXX)
echo "$mdir" > "$dir/munge.dir"
# munged is strict: its key and folders belong to the munge user, not world-writable.
chown munge:munge "$mdir"
chmod 0755 "$mdir"  # munged wants its socket folder reachable by all, writable by it only
dd if=/dev/urandom of="$mdir/munge.key" bs=1024 count=1 status=none
chown munge:munge "$mdir/munge.key"
chmod 0400 "$mdir/munge.key"
runuser -u munge -- /usr/sbin/munged --key-file="$mdir/munge.key" --socket="$mdir/munge.socket" \
  --pid-file="$mdir/munged.pid" --log-file="$mdir/munged.log" --seed-file="$mdir/munged.seed"

read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
cpus=8
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
cat > "$dir/slurm.conf" <<CONF
ClusterName=pipebench-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$mdir/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/logs/slurmctld.log
SlurmdLogFile=$dir/logs/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$dir/slurm.conf
# A daemon that cannot start (slurmd without a cgroup file system mounted at
# /sys/fs/cgroup, a port taken) exits at once: say which, with its log.
start_failed() {  # NAME LOG
  echo "cluster.sh: $1 did not start; its log ($2):" >&2
  tail -n 8 "$2" >&2 || true
  exit 1
}
/usr/sbin/slurmctld -f "$SLURM_CONF" || start_failed slurmctld "$dir/logs/slurmctld.log"
/usr/sbin/slurmd -f "$SLURM_CONF" -N localhost || start_failed slurmd "$dir/logs/slurmd.log"
for _ in $(seq 300); do
  state=$(sinfo -h -n localhost -o %T 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.2
done
if [[ ${state:-} != idle ]]; then
  echo "cluster.sh: the node did not become idle (state '${state:-?}'); logs in $dir/logs" >&2
  tail -20 "$dir/logs/slurmctld.log" "$dir/logs/slurmd.log" >&2 || true
  exit 1
fi
echo "export SLURM_CONF=$SLURM_CONF"
