#!/usr/bin/env bash
# The services the cluster tests drive for real, on this machine, started idempotently:
#   - a single-node Slurm: munge, slurmctld and slurmd on localhost (Debian's slurm-wlm), one partition
#     `debug` of this machine's CPUs;
#   - a PostgreSQL server on loopback (Debian's postgresql) with a role and database `harness`.
# Running it again starts what is not running and changes nothing else. With --env it prints the
# settings the tests read (HARNESS_TEST_POSTGRES); without these services the cluster tests skip,
# naming this script. It needs root (it installs packages, writes /etc/slurm and starts daemons) and
# says so, changing nothing, when run as another user: put sudo in front where you are not root.
# The services are the machine's: every test run on it shares them, and `stop` stops them for all.
#
#   scripts/services.sh                   # as root: install if needed, then start
#   eval "$(scripts/services.sh --env)"   # the same, and export the test settings in this shell
#   scripts/services.sh stop              # stop slurmd, slurmctld, munged and PostgreSQL (data kept)
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "services: needs root (it installs packages, writes /etc/slurm and starts daemons); nothing was" \
        "changed: run it as root (sudo $0 $*)" >&2
    exit 1
fi

PG_USER=harness
PG_DB=harness
PG_PASSWORD=${HARNESS_TEST_PG_PASSWORD:-harness-test}
PG_URL="postgresql://${PG_USER}:${PG_PASSWORD}@127.0.0.1:5432/${PG_DB}"

log() { echo "services: $*" >&2; }

need_packages() {
    local missing=()
    command -v slurmctld >/dev/null || missing+=(slurm-wlm)
    command -v munged >/dev/null || missing+=(munge)
    command -v pg_ctlcluster >/dev/null || missing+=(postgresql)
    if ((${#missing[@]})); then
        log "installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
    fi
}

start_munge() {
    if [ ! -s /etc/munge/munge.key ]; then
        mkdir -p /etc/munge
        dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    fi
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    if ! munge -n >/dev/null 2>&1; then
        log "starting munged"
        runuser -u munge -- /usr/sbin/munged --force
        for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
    fi
}

write_slurm_conf() {
    local cpus mem
    cpus=$(nproc)
    mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
    mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
    cat > /etc/slurm/slurm.conf.new <<CONF
# written by harness scripts/services.sh: a single-node cluster for the tests
ClusterName=harness
SlurmctldHost=localhost
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
# a job over its time limit is ended within a few seconds, not a minute
KillWait=5
OverTimeLimit=0
MinJobAge=300
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=localhost NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
    if ! cmp -s /etc/slurm/slurm.conf.new /etc/slurm/slurm.conf 2>/dev/null; then
        mv /etc/slurm/slurm.conf.new /etc/slurm/slurm.conf
        return 0  # changed
    fi
    rm -f /etc/slurm/slurm.conf.new
    return 1
}

start_slurm() {
    local changed=0
    write_slurm_conf && changed=1
    if ((changed)); then
        # daemons started with another configuration are stopped first
        for pidfile in /run/slurmd.pid /run/slurmctld.pid; do
            [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
        done
        sleep 1
    fi
    if ! scontrol ping 2>/dev/null | grep -q UP; then
        log "starting slurmctld"
        slurmctld
        for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
    fi
    # a pid file left by a slurmd that was killed may name another process now: ask for slurmd by its name
    if [ "$(cat "/proc/$(cat /run/slurmd.pid 2>/dev/null || echo 0)/comm" 2>/dev/null)" != slurmd ]; then
        log "starting slurmd"
        slurmd -N localhost
    fi
    for _ in $(seq 100); do
        state=$(sinfo -h -n localhost -o %T 2>/dev/null || true)
        case "$state" in idle*|mixed*|alloc*) break ;; esac
        if [[ "$state" == drain* || "$state" == down* ]]; then
            scontrol update NodeName=localhost State=RESUME 2>/dev/null || true
        fi
        sleep 0.2
    done
    log "slurm: node localhost $(sinfo -h -n localhost -o %T 2>/dev/null)"
}

start_postgres() {
    local version
    version=$(pg_lsclusters -h | awk 'NR==1 {print $1}')
    if [ -z "$version" ]; then
        version=$(ls /usr/lib/postgresql | sort -V | tail -1)
        pg_createcluster "$version" main >&2
    fi
    if ! pg_lsclusters -h | awk '$2=="main" {print $4}' | grep -q online; then
        log "starting PostgreSQL $version"
        pg_ctlcluster "$version" main start
    fi
    runuser -u postgres -- psql -q -v ON_ERROR_STOP=1 -c "DO \$\$ BEGIN
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '${PG_USER}') THEN
            CREATE ROLE ${PG_USER} LOGIN PASSWORD '${PG_PASSWORD}' CREATEDB;
        END IF; END \$\$;" >&2
    if ! runuser -u postgres -- psql -tAc "SELECT 1 FROM pg_database WHERE datname='${PG_DB}'" | grep -q 1; then
        runuser -u postgres -- createdb -O "${PG_USER}" "${PG_DB}"
    fi
    log "postgresql: online on 127.0.0.1:5432, database ${PG_DB}"
}

# Each daemon stopped by the process its pid file names, where that process is the daemon (a pid file left
# by one that was killed may name another process now), then waited for.
stop_daemon() {
    local name=$1 pidfile=$2 pid
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]; then
        log "stopping $name"
        kill "$pid"
        for _ in $(seq 100); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
    fi
}

stop_all() {
    stop_daemon slurmd /run/slurmd.pid
    stop_daemon slurmctld /run/slurmctld.pid
    stop_daemon munged /run/munge/munged.pid
    if command -v pg_lsclusters >/dev/null; then
        pg_lsclusters -h | awk '$2=="main" && $4 ~ /online/ {print $1}' | while read -r version; do
            log "stopping PostgreSQL $version"
            pg_ctlcluster "$version" main stop
        done
    fi
    log "stopped"
}

if [ "${1:-}" = "stop" ]; then
    stop_all >&2
    exit 0
fi

# Only the settings go to standard output (for eval); everything the daemons' tools print (pg_ctlcluster's
# "Removed stale pid file", say) goes to standard error, which the daemons may keep open: a command
# substitution waits only for standard output to close.
{
    need_packages
    start_munge
    start_slurm
    start_postgres
} >&2
if [ "${1:-}" = "--env" ]; then
    echo "export HARNESS_TEST_POSTGRES='${PG_URL}'"
fi
