#!/usr/bin/env bash
# A one-node Slurm cluster on this machine (loopback only) for the tests: a private munged, slurmctld and
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
#
# Ports: slurmctld takes one and the five slurmd the next five. Without
# AISCALE_TEST_SLURMCTLD_PORT the script picks six consecutive ports below the kernel's
# ephemeral range that no socket of this machine uses (`ss`), and if slurmctld still finds
# its port taken (a race with another program) it starts again on other ports, up to three
# times.
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
  local f
  for f in "$dir"/run/slurmd-*.pid; do stop_pidfile "$f" slurmd; done
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

ports_free() {  # ports_free FIRST COUNT: no socket of this machine (any state) uses them
  local first=$1 count=$2 used
  used=$(ss -Htan 2>/dev/null | awk '{n = split($4, a, ":"); print a[n]}')
  local p
  for ((p = first; p < first + count; p++)); do
    grep -qx "$p" <<<"$used" && return 1
  done
  return 0
}

pick_ports() {  # prints a first port of six free consecutive ones, below the ephemeral range
  local low=20000 high ephemeral_low base
  ephemeral_low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
  [[ "$ephemeral_low" =~ ^[0-9]+$ ]] && [ "$ephemeral_low" -gt $((low + 800)) ] || ephemeral_low=32768
  high=$((ephemeral_low - 8))
  for _ in $(seq 1 50); do
    base=$((low + (RANDOM % ((high - low) / 8)) * 8))
    ports_free "$base" 6 && { echo "$base"; return 0; }
  done
  return 1
}

start() {
  local dir=$1 partition=${2:-debug} attempt port
  if [ -n "${AISCALE_TEST_SLURMCTLD_PORT:-}" ]; then
    start_once "$dir" "$partition" "$AISCALE_TEST_SLURMCTLD_PORT"
    [ $? -eq 2 ] && die "slurmctld's port $AISCALE_TEST_SLURMCTLD_PORT (AISCALE_TEST_SLURMCTLD_PORT) is taken: unset it to let the script pick free ports"
    return 0
  fi
  for attempt in 1 2 3; do
    port=$(pick_ports) || die "no six free consecutive TCP ports found between 20000 and the ephemeral range"
    start_once "$dir" "$partition" "$port"
    case $? in
      0) return 0 ;;
      2) echo "local_cluster: port $port was taken when slurmctld bound it; trying other ports" >&2
         rm -rf "$dir"/{run,log,state,spool,munge} ;;
      *) exit 1 ;;
    esac
  done
  die "slurmctld found its port taken three times (last tried: $port)"
}

# start_once DIR PARTITION PORT: 0 up, 2 slurmctld's port was taken (everything stopped), else dies
start_once() {
  local dir=$1 partition=$2 ctld_port=$3
  [ "$(id -u)" -eq 0 ] || die "must run as root: slurmd starts jobs as the user who submitted them"
  for tool in munged mungekey slurmctld slurmd sbatch sinfo scontrol; do
    command -v "$tool" >/dev/null ||
      die "'$tool' not found: install Debian's slurm-wlm and munge (bash scripts/setup.sh)"
  done
  mkdir -p "$dir"/{run,log,state,spool,munge} || die "cannot create $dir"
  chmod 711 "$dir/munge"  # others reach the socket, not the key (0600)
  echo "$partition" >"$dir/partition"

  # munge: a fresh key and socket of our own.
  rm -f "$dir/munge/munge.key"
  mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null 2>&1 ||
    die "mungekey could not create $dir/munge/munge.key"
  munged --force --num-threads=10 --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" 2>>"$dir/log/munged.log" ||
    { log_tails "$dir"; stop_all "$dir"; die "munged did not start (log above)"; }

  local cpus mem_mib host
  cpus=$(nproc)
  # The node is this machine under its own short name (slurmd finds itself by it), reached
  # on loopback. ("localhost" as a node name only works while it is the only node.)
  host=$(hostname -s)
  mem_mib=$(awk '/MemTotal/ {printf "%d", $2 / 1024 - 1024}' /proc/meminfo)
  [ "$mem_mib" -gt 512 ] || mem_mib=512
  cat >"$dir/slurm.conf" <<CONF
# One node (this machine, on loopback), written by tests/slurm/local_cluster.sh
ClusterName=aiscaletest
MailProg=/bin/true
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldPort=$ctld_port
SlurmdPort=$((ctld_port + 1))
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
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mib State=UNKNOWN
PartitionName=$partition Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
# A partition shaped like a GPU site's (4 nodes of 64 cores and 4 GPUs each), for
# \`sbatch --test-only\` of generated site scripts: four more slurmd of this machine, each
# on its own port, declaring what the site's nodes have (config_overrides: the hardware
# is not checked; the GPUs have no devices). Nothing is meant to run there.
GresTypes=gpu
SlurmdParameters=config_overrides
NodeName=gpusite1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((ctld_port + 1 + 1)) CPUs=64 RealMemory=4096 Gres=gpu:4 State=UNKNOWN
NodeName=gpusite2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((ctld_port + 1 + 2)) CPUs=64 RealMemory=4096 Gres=gpu:4 State=UNKNOWN
NodeName=gpusite3 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((ctld_port + 1 + 3)) CPUs=64 RealMemory=4096 Gres=gpu:4 State=UNKNOWN
NodeName=gpusite4 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((ctld_port + 1 + 4)) CPUs=64 RealMemory=4096 Gres=gpu:4 State=UNKNOWN
PartitionName=gpusite Nodes=gpusite[1-4] MaxTime=INFINITE State=UP
CONF
  # The gpusite nodes' 4 "GPUs" are character devices that are not GPUs: the scheduler only
  # needs four files per node to count.
  echo "NodeName=gpusite[1-4] Name=gpu File=/dev/null,/dev/zero,/dev/full,/dev/urandom" >"$dir/gres.conf"
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld 2>>"$dir/log/slurmctld.log" ||
    { log_tails "$dir"; stop_all "$dir"; die "slurmctld did not start (log above)"; }
  # slurmctld forks before it binds its port: see it bound, or dead, before going on.
  local ctld_pid=""
  for _ in $(seq 1 50); do
    ctld_pid=$(cat "$dir/run/slurmctld.pid" 2>/dev/null)
    if grep -q "Address already in use" "$dir/log/slurmctld.log" 2>/dev/null; then
      stop_all "$dir"
      return 2
    fi
    ss -Htlnp 2>/dev/null | grep ":$ctld_port " | grep -q '"slurmctld"' && break
    sleep 0.1
  done
  if [[ ! "$ctld_pid" =~ ^[0-9]+$ ]] || ! kill -0 "$ctld_pid" 2>/dev/null; then
    log_tails "$dir"; stop_all "$dir"; die "slurmctld exited right after starting (log above)"
  fi
  local node
  for node in "$host" gpusite1 gpusite2 gpusite3 gpusite4; do
    mkdir -p "$dir/spool/$node"
    slurmd -N "$node" 2>>"$dir/log/slurmd-$node.log" ||
      { log_tails "$dir"; stop_all "$dir"; die "slurmd of node $node did not start (log above)"; }
  done

  local state="" deadline=$((SECONDS + 30))
  while [ "$SECONDS" -lt "$deadline" ]; do
    kill -0 "$ctld_pid" 2>/dev/null ||
      { log_tails "$dir"; stop_all "$dir"; die "slurmctld exited while the nodes registered (log above)"; }
    state=$(timeout 5 sinfo --noheader --partition="$partition" --format=%t 2>/dev/null | head -n 1)
    case "$state" in idle | mix | alloc)
      # the GPU-site partition too (its jobs are only ever tested, but its nodes must be up)
      if [ "$(timeout 5 sinfo --noheader --partition=gpusite --format=%t 2>/dev/null | head -n 1)" = idle ]; then
        echo "SLURM_CONF=$SLURM_CONF"
        return 0
      fi ;;
    esac
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
