#!/usr/bin/env bash
# bulkem on a real Slurm (issue 23), run by `make test` after R CMD check:
# starts munged, slurmctld and slurmd on this machine (as root) with a
# config written to a temp dir, runs tests/slurm/check.R against the
# installed package (R_LIBS, default: the check's library; another R script
# may be given as the argument), then stops the
# daemons it started, by their pid files. Installs Slurm, munge and
# future.batchtools from Debian when missing. If the daemons cannot start
# here it says so and exits 0 (the R checks need them); a failing check
# exits 1.
set -uo pipefail
cd "$(dirname "$0")/../.."
lib=${R_LIBS:-$PWD/.check/bulkem.Rcheck}
dir=$(mktemp -d /tmp/bulkem-slurm.XXXXXX)
host=$(hostname -s)
started=()

missing=""
for p in slurmctld slurmd slurm-client munge r-cran-future.batchtools; do
  dpkg -s $p >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

stop() {
  for pidfile in "${started[@]}"; do
    [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
  done
  sleep 1
  rm -rf "$dir"
}
trap stop EXIT

skip() {
  echo "Slurm test SKIPPED: $1"
  for log in "$dir"/*.log; do [ -f "$log" ] && { echo "== $log"; tail -5 "$log"; }; done
  exit 0
}

mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
cpus=$(nproc)
mem=$(awk '/MemTotal/ { print int($2 / 1024 * 0.8) }' /proc/meminfo)
cat > "$dir/slurm.conf" <<CONF
ClusterName=bulkemtest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=600
MpiDefault=none
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$dir/slurm.conf

# munge: a key of our own and a socket in the temp dir.
dd if=/dev/urandom bs=1 count=1024 of="$dir/munge/munge.key" 2>/dev/null
chmod 700 "$dir/munge"; chmod 400 "$dir/munge/munge.key"
socket=$dir/munge/munge.socket
/usr/sbin/munged --force --key-file="$dir/munge/munge.key" --socket="$socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" \
  >/dev/null 2>&1 || skip "munged did not start"
started+=("$dir/munged.pid")
# Slurm's munge plugin finds the socket through AuthInfo.
sed -i "s|^AuthType=auth/munge|AuthType=auth/munge\nAuthInfo=socket=$socket|" "$dir/slurm.conf"
slurmctld -f "$dir/slurm.conf" >/dev/null 2>&1 || skip "slurmctld did not start"
started+=("$dir/slurmctld.pid")
sleep 1
slurmd -f "$dir/slurm.conf" >/dev/null 2>&1 || skip "slurmd did not start"
started+=("$dir/slurmd.pid")
for _ in $(seq 30); do
  sinfo -h -o %T 2>/dev/null | grep -qE '^idle' && break
  sleep 1
done
sinfo -h -o %T 2>/dev/null | grep -qE '^idle' || skip "no idle node after 30 s"
timeout 60 srun --ntasks=1 true >/dev/null 2>&1 || skip "a job did not run"

echo "Slurm up ($SLURM_CONF); checks on the package in $lib"
export USER=${USER:-$(id -un)}
start=$(date +%s)
R_LIBS="$lib" Rscript "${1:-tests/slurm/check.R}"
status=$?
echo "Slurm checks: exit $status in $(( $(date +%s) - start )) s"
exit $status
