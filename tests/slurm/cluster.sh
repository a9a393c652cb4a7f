#!/usr/bin/env bash
# A one-node Slurm cluster on loopback for the sweep executor test, entirely inside DIR:
# munged (with a key generated here), slurmctld and slurmd, proctrack/pgid and task/none so
# nothing needs cgroups.
#   cluster.sh start DIR [WATCH_PID]   start; prints the environment line SLURM_CONF=...
#                                      (with WATCH_PID, a watcher stops the daemons when
#                                      that process ends, however it ends)
#   cluster.sh stop DIR                stop every daemon started in DIR
set -u
cmd=${1:?start|stop}; dir=${2:?DIR}

stop() {
    local f pid
    # jobs still queued or running on this cluster first, so no job step outlives it
    if [ -s "$dir/slurmctld.pid" ] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
        SLURM_CONF="$dir/slurm.conf" scancel --quiet --user="$(id -un)" 2>/dev/null
        for _ in $(seq 30); do
            [ -z "$(SLURM_CONF="$dir/slurm.conf" squeue -h 2>/dev/null)" ] && break
            sleep 0.2
        done
    fi
    for f in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
        [ -s "$f" ] || continue
        pid=$(cat "$f")
        kill -TERM "$pid" 2>/dev/null
    done
    for _ in $(seq 50); do
        local alive=0
        for f in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
            [ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && alive=1
        done
        [ $alive -eq 0 ] && break
        sleep 0.1
    done
    for f in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
        [ -s "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
        rm -f "$f"
    done
    return 0
}

# Two free loopback ports (held together while chosen, so they differ).
free_ports() {
    python3 - <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 10000)) $((30000 + RANDOM % 10000))
import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])
PY
}

start() {
    mkdir -p "$dir/state" "$dir/spool" "$dir/munge-key" "$dir/munge"
    chmod 700 "$dir/munge-key"; chmod 755 "$dir" "$dir/munge"
    dd if=/dev/urandom of="$dir/munge-key/munge.key" bs=1024 count=1 2>/dev/null
    chmod 400 "$dir/munge-key/munge.key"
    # the daemons must not hold the caller's stdout/stderr open
    munged --force --socket="$dir/munge/munge.sock" --key-file="$dir/munge-key/munge.key" \
        --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge-key/seed" \
        </dev/null >/dev/null 2>&1 || { echo "cluster.sh: munged did not start (see $dir/munged.log)" >&2; return 1; }
    local cpus mem p1 p2
    cpus=$(nproc); mem=$(awk '/MemTotal/ {print int($2 / 1024 / 2)}' /proc/meminfo)
    read -r p1 p2 < <(free_ports)
    # MpiDefault=none is Slurm's own default, as on a stock install: a multi-rank job must
    # name srun's MPI plugin itself (the job script's srun --mpi=pmix), and the test checks it
    cat > "$dir/slurm.conf" <<CONF
ClusterName=mpxtest
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$p1
SlurmdPort=$p2
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=600
NodeName=mpxnode NodeAddr=127.0.0.1 NodeHostname=$(hostname) CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=mpxnode Default=YES MaxTime=INFINITE State=UP
CONF
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -i -f "$SLURM_CONF" </dev/null >/dev/null 2>&1 || { echo "cluster.sh: slurmctld did not start (see $dir/slurmctld.log)" >&2; return 1; }
    slurmd -N mpxnode -f "$SLURM_CONF" </dev/null >/dev/null 2>&1 || { echo "cluster.sh: slurmd did not start (see $dir/slurmd.log)" >&2; return 1; }
    for _ in $(seq 100); do
        sinfo -h -N -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)' && { echo "SLURM_CONF=$SLURM_CONF"; return 0; }
        sleep 0.2
    done
    echo "cluster.sh: the node did not come up within 20 s (see $dir/slurmctld.log, $dir/slurmd.log)" >&2
    return 1
}

case $cmd in
start)
    if ! start; then stop; exit 1; fi
    if [ -n "${3:-}" ]; then
        watch=$3
        ( trap '' HUP INT; while kill -0 "$watch" 2>/dev/null && [ -s "$dir/slurmctld.pid" ]; do sleep 1; done; stop ) \
            </dev/null >/dev/null 2>&1 &
    fi ;;
stop) stop ;;
*) echo "usage: cluster.sh start|stop DIR [WATCH_PID]" >&2; exit 2 ;;
esac
