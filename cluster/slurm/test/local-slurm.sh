#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for `make test-slurm` (docs/cluster.md, "Slurm").
#
#   cluster/slurm/test/local-slurm.sh up DIR     # munged, slurmctld, slurmd; every path under DIR
#   cluster/slurm/test/local-slurm.sh down DIR   # stops them by the pids in DIR/*.pid
#
# `up` prints nothing but the slurm.conf path on stdout (export SLURM_CONF=$(... up DIR)).
# Needs root (the daemons run as root: SlurmUser=root) and Debian's slurm-wlm and munge.
# Nothing is written outside DIR: munged gets its own key, socket, pid and log files there,
# and slurm.conf points Slurm's munge plugin at that socket.
set -euo pipefail

cmd=${1:?usage: local-slurm.sh up|down DIR}
dir=${2:?usage: local-slurm.sh up|down DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

stop() {
  # Newest first: slurmd, then slurmctld, then munged. Each by its own pid file, never by name.
  local name pid
  for name in slurmd slurmctld munged; do
    [ -s "$dir/$name.pid" ] || continue
    pid=$(cat "$dir/$name.pid")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/$name.pid"
  done
}

if [ "$cmd" = down ]; then stop; exit 0; fi
[ "$cmd" = up ] || { echo "usage: local-slurm.sh up|down DIR" >&2; exit 2; }

for tool in munged slurmctld slurmd sbatch; do
  command -v "$tool" >/dev/null || { echo "local-slurm.sh: $tool not found (apt-get install slurm-wlm munge)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "local-slurm.sh: must run as root (SlurmUser=root)" >&2; exit 1; }

trap 'stop' ERR
mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
chmod 700 "$dir/munge"
if [ ! -s "$dir/munge/munge.key" ]; then
  head -c 1024 /dev/urandom > "$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
fi
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"

# The first pair of free ports from 6817 (Slurm's own), so that a Slurm already running here is left alone.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=6817
while listening "$port" || listening $((port + 1)); do port=$((port + 2)); done

host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
cat > "$dir/slurm.conf" <<CONF
ClusterName=wikiprep-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
KillWait=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=$port
SlurmdPort=$((port + 1))
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 60); do
  if sinfo -h -o %T 2>/dev/null | grep -qx idle; then echo "$SLURM_CONF"; exit 0; fi
  sleep 0.5
done
echo "local-slurm.sh: the node did not come up idle in 30 s; logs in $dir/log" >&2
sinfo >&2 || true
stop
exit 1
