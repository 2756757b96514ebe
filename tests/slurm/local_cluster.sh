#!/usr/bin/env bash
# A one-node Slurm cluster on localhost for the tests: a private munged, slurmctld and
# slurmd, all configured, logging and keeping state under one scratch folder, so that
# nothing of the machine's own /etc/slurm or munge is used or changed. Needs root (slurmd
# runs jobs as their submitter) and Debian's slurm-wlm and munge (scripts/setup.sh).
#
#   local_cluster.sh start DIR [PARTITION]   start the daemons; prints SLURM_CONF=DIR/slurm.conf
#   local_cluster.sh stop DIR                end them by the PIDs in their pid files
#
# Every command then needs SLURM_CONF=DIR/slurm.conf in its environment. `start` waits
# until the node is idle and fails (exit 1) with the reason and the daemons' log tails
# otherwise, after stopping whatever it started.
set -uo pipefail

die() {
  echo "local_cluster: $*" >&2
  exit 1
}

stop_pidfile() {  # stop_pidfile FILE NAME: SIGTERM, then SIGKILL after 10 s
  local file=$1 name=$2 pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file" 2>/dev/null)
  rm -f "$file"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  echo "local_cluster: $name ($pid) did not stop on SIGTERM; killing it" >&2
  kill -KILL "$pid" 2>/dev/null
  return 0
}

stop_all() {
  local dir=$1
  # Jobs first, so that slurmd does not leave their processes behind.
  [ -f "$dir/slurm.conf" ] && [ -f "$dir/run/slurmctld.pid" ] &&
    SLURM_CONF="$dir/slurm.conf" timeout 10 scancel --full --quiet --partition="$(cat "$dir/partition" 2>/dev/null || echo debug)" 2>/dev/null
  stop_pidfile "$dir/run/slurmd.pid" slurmd
  stop_pidfile "$dir/run/slurmctld.pid" slurmctld
  stop_pidfile "$dir/run/munged.pid" munged
}

log_tails() {
  local dir=$1 f
  for f in "$dir"/log/*.log; do
    [ -f "$f" ] || continue
    echo "---- $f (last 15 lines)" >&2
    tail -n 15 "$f" >&2
  done
}

start() {
  local dir=$1 partition=${2:-debug}
  [ "$(id -u)" -eq 0 ] || die "must run as root: slurmd starts jobs as the user who submitted them"
  for tool in munged mungekey slurmctld slurmd sbatch sinfo scontrol; do
    command -v "$tool" >/dev/null ||
      die "'$tool' not found: install Debian's slurm-wlm and munge (bash scripts/setup.sh)"
  done
  mkdir -p "$dir"/{run,log,state,spool,munge} || die "cannot create $dir"
  chmod 700 "$dir/munge"
  echo "$partition" >"$dir/partition"

  # munge: a fresh key and socket of our own.
  rm -f "$dir/munge/munge.key"
  mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null 2>&1 ||
    die "mungekey could not create $dir/munge/munge.key"
  munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" 2>>"$dir/log/munged.log" ||
    { log_tails "$dir"; stop_all "$dir"; die "munged did not start (log above)"; }

  local cpus mem_mib
  cpus=$(nproc)
  mem_mib=$(awk '/MemTotal/ {printf "%d", $2 / 1024 - 1024}' /proc/meminfo)
  [ "$mem_mib" -gt 512 ] || mem_mib=512
  cat >"$dir/slurm.conf" <<CONF
# One node, localhost, written by tests/slurm/local_cluster.sh
ClusterName=aiscaletest
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=${AISCALE_TEST_SLURMCTLD_PORT:-16817}
SlurmdPort=${AISCALE_TEST_SLURMD_PORT:-16818}
# No cgroups in containers and CI: track processes by parent id, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
# Quick turn-around for tests.
SchedulerParameters=sched_interval=2
MinJobAge=600
KillWait=5
NodeName=localhost CPUs=$cpus RealMemory=$mem_mib State=UNKNOWN
PartitionName=$partition Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld 2>>"$dir/log/slurmctld.log" ||
    { log_tails "$dir"; stop_all "$dir"; die "slurmctld did not start (log above)"; }
  slurmd 2>>"$dir/log/slurmd.log" ||
    { log_tails "$dir"; stop_all "$dir"; die "slurmd did not start (log above)"; }

  local state=""
  for _ in $(seq 1 60); do
    state=$(sinfo --noheader --partition="$partition" --format=%t 2>/dev/null | head -n 1)
    case "$state" in idle | mix | alloc) echo "SLURM_CONF=$SLURM_CONF"; return 0 ;; esac
    sleep 0.5
  done
  log_tails "$dir"
  stop_all "$dir"
  die "the node did not become idle within 30 s (sinfo state: '${state:-none}'; logs above)"
}

case "${1:-}" in
  start) [ -n "${2:-}" ] || die "usage: local_cluster.sh start DIR [PARTITION]"; start "$2" "${3:-debug}" ;;
  stop) [ -n "${2:-}" ] || die "usage: local_cluster.sh stop DIR"; stop_all "$2" ;;
  *) die "usage: local_cluster.sh start DIR [PARTITION] | stop DIR" ;;
esac
