#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, from Debian's packages, for testing the workflow's
# cluster path (tests/test_slurm.py; .ci/run calls this before `make test`).
#
#   sudo tools/slurm_localhost.sh          # install if needed, write the configs, start, check
#   sudo tools/slurm_localhost.sh stop     # stop the daemons
#
# No systemd is assumed: munged, mariadbd, slurmdbd, slurmctld and slurmd are started directly.
# Accounting goes through slurmdbd (MariaDB), so `sacct` works as on a real cluster. The node
# line is the one `slurmd -C` prints for this machine; one partition `debug` holds it. Jobs run
# as the submitting user; proctrack/linuxproc and task/none need no cgroups (containers).
# Idempotent: a second call restarts the daemons with the same configuration.
set -euo pipefail

CLUSTER=dive-test
ETC=/etc/slurm
LOG=/var/log/slurm
SPOOL=/var/spool/slurm
DB_PASS=dive-slurm-test   # a throw-away localhost database, reachable only through its socket

need_root() { [ "$(id -u)" = 0 ] || { echo "slurm_localhost.sh: run as root (it installs packages and starts daemons)" >&2; exit 1; }; }

stop() {
  for d in slurmd slurmctld slurmdbd; do pkill -x "$d" 2>/dev/null || true; done
  for _ in $(seq 50); do pgrep slurm >/dev/null || break; sleep 0.1; done
}

wait_for() {  # wait_for <seconds> <description> <command...>
  local secs=$1 what=$2; shift 2
  for _ in $(seq $((secs * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "slurm_localhost.sh: $what did not come up in ${secs}s" >&2
  for f in "$LOG"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
  exit 1
}

need_root
if [ "${1:-start}" = stop ]; then stop; echo "slurm: stopped"; exit 0; fi
t0=$(date +%s)

# ---- packages ---------------------------------------------------------------------------------
PKGS=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "slurm: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # a policy-rc.d keeps the packages' init scripts from starting daemons (started below instead)
  own_policy=false
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && own_policy=true
  fi
  apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
  if $own_policy; then rm -f /usr/sbin/policy-rc.d; fi
fi
t1=$(date +%s)
stop

# ---- munge ------------------------------------------------------------------------------------
mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
chmod 0700 /etc/munge /var/lib/munge /var/log/munge
chmod 0400 /etc/munge/munge.key
chmod 0755 /run/munge
pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1
wait_for 10 munged sh -c 'munge -n | unmunge'

# ---- MariaDB (slurmdbd's store) ---------------------------------------------------------------
mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
[ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/var/log/mariadb-install-db.log 2>&1
if ! pgrep -x mariadbd >/dev/null; then
  (cd / && setsid /usr/sbin/mariadbd --user=mysql --datadir=/var/lib/mysql \
     --socket=/run/mysqld/mysqld.sock --skip-networking </dev/null >/var/log/mariadbd.log 2>&1 &)
fi
wait_for 30 mariadbd mariadb -uroot -e 'select 1'
mariadb -uroot <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
SQL

# ---- configuration ----------------------------------------------------------------------------
mkdir -p "$ETC" "$LOG" "$SPOOL/ctld" "$SPOOL/d"
chown slurm:slurm "$LOG" "$SPOOL/ctld"
HOST=$(hostname -s)
NODE=$(slurmd -C | head -n 1)                   # NodeName=<host> CPUs=... RealMemory=...
cat > "$ETC/slurm.conf" <<EOF
# written by tools/slurm_localhost.sh
ClusterName=$CLUSTER
SlurmctldHost=$HOST
SlurmUser=slurm
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
# a request no partition can ever satisfy is refused at submission, not left pending
EnforcePartLimits=ALL
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
$NODE State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
cat > "$ETC/slurmdbd.conf" <<EOF
# written by tools/slurm_localhost.sh
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=/run/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$DB_PASS
EOF
chown slurm:slurm "$ETC/slurmdbd.conf"
chmod 0600 "$ETC/slurmdbd.conf"

# ---- daemons ----------------------------------------------------------------------------------
/usr/sbin/slurmdbd </dev/null >/dev/null 2>&1   # daemonises; log in $LOG
wait_for 30 slurmdbd sacctmgr -n list cluster
sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>&1 || true
/usr/sbin/slurmctld </dev/null >/dev/null 2>&1   # daemonises; log in $LOG
wait_for 30 slurmctld scontrol ping
/usr/sbin/slurmd </dev/null >/dev/null 2>&1   # daemonises; log in $LOG
wait_for 30 "the node ${HOST}" sh -c "sinfo -h -N -o '%t' | grep -qE '^(idle|mix|alloc)'"
# every user who submits gets an association (the executor plugin reads the default account)
sacctmgr -i add account dive Description=tests Organization=dive >/dev/null 2>&1 || true
for u in root ${SUDO_USER:-}; do
  sacctmgr -i add user "$u" Account=dive DefaultAccount=dive >/dev/null 2>&1 || true
done

# ---- check: a job runs and accounting sees it -------------------------------------------------
jid=$(sbatch --parsable -o /dev/null --wrap true)
wait_for 60 "accounting of job $jid" sh -c "sacct -n -X -j $jid -o State | grep -q COMPLETED"
t2=$(date +%s)
echo "slurm: cluster $CLUSTER up on $HOST ($(echo "$NODE" | grep -o 'CPUs=[0-9]*') $(echo "$NODE" | grep -o 'RealMemory=[0-9]*')); test job $jid COMPLETED in sacct; packages $((t1 - t0)) s, start $((t2 - t1)) s"
sinfo
