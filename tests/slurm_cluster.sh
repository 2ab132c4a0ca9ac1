# slurm_cluster.sh: a real single-host Slurm for tests (sourced): munged, slurmctld and two
# slurmd "nodes" n1, n2 on 127.0.0.1 with 4 CPUs each, all state under $SLURM_DIR, started and
# stopped by PID (no systemd). Needs root and Debian's slurmctld slurmd slurm-client munge.
#   slurm_start DIR   stop daemons a killed earlier run left in DIR, start (returns when both
#                     nodes are idle) and export SLURM_CONF
#   slurm_stop        stop what slurm_start started
slurm_start() {
  SLURM_DIR=$1
  slurm_stop  # daemons left behind by a test that was killed before it could clean up
  rm -rf "$SLURM_DIR"
  local host
  host=$(hostname -s)
  mkdir -p "$SLURM_DIR"/{state,log,spool/n1,spool/n2,tmpfs/n1,tmpfs/n2}
  SLURM_STARTED_MUNGE=0
  if ! munge -n > /dev/null 2>&1; then
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    chown munge:munge /run/munge /var/lib/munge /var/log/munge 2> /dev/null || true
    if [ ! -s /etc/munge/munge.key ]; then
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
      chown munge:munge /etc/munge/munge.key
      chmod 400 /etc/munge/munge.key
    fi
    runuser -u munge -- /usr/sbin/munged || return 1
    SLURM_STARTED_MUNGE=1
  fi
  # Ports away from the defaults (6817/6818), so a Slurm already on the machine is left alone.
  cat > "$SLURM_DIR/slurm.conf" <<CONF
ClusterName=vit3dtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=26817
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool/%n
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd-%n.pid
SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_DIR/log/slurmd-%n.log
TmpFS=$SLURM_DIR/tmpfs/%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=10
NodeName=n[1-2] NodeHostname=$host NodeAddr=127.0.0.1 Port=[27001-27002] CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF=$SLURM_DIR/slurm.conf
  # Another test's cluster on these ports (a concurrent run): slurmctld would still start and
  # exit 0, and this test would submit into that cluster (and cancel its jobs at its end).
  if (exec 3<> /dev/tcp/127.0.0.1/26817) 2> /dev/null; then
    echo "slurm_start: port 26817 is taken (another test's Slurm controller?): not starting"
    return 1
  fi
  /usr/sbin/slurmctld -c -f "$SLURM_CONF" || return 1
  /usr/sbin/slurmd -N n1 -f "$SLURM_CONF" || return 1
  /usr/sbin/slurmd -N n2 -f "$SLURM_CONF" || return 1
  local i
  for i in $(seq 1 60); do
    [ "$(sinfo -h -N -o %T 2> /dev/null | grep -c '^idle')" -eq 2 ] && return 0
    sleep 1
  done
  echo "slurm_start: the nodes did not become idle; sinfo says:"
  sinfo -N 2>&1
  tail -5 "$SLURM_DIR"/log/*.log
  return 1
}

# Signals the daemon whose pid file is $1, if that pid is still a Slurm daemon.
slurm_signal() {
  local pid
  [ -s "$1" ] && pid=$(cat "$1") && grep -q '^slurm' "/proc/$pid/comm" 2> /dev/null && kill "$2" "$pid" 2> /dev/null
}

slurm_stop() {
  [ -n "${SLURM_DIR:-}" ] || return 0
  local f
  for f in "$SLURM_DIR"/slurmd-n1.pid "$SLURM_DIR"/slurmd-n2.pid "$SLURM_DIR"/slurmctld.pid; do
    slurm_signal "$f" -TERM
  done
  sleep 1
  for f in "$SLURM_DIR"/slurmd-n1.pid "$SLURM_DIR"/slurmd-n2.pid "$SLURM_DIR"/slurmctld.pid; do
    slurm_signal "$f" -KILL
  done
  if [ "${SLURM_STARTED_MUNGE:-0}" = 1 ] && [ -s /run/munge/munged.pid ]; then
    kill "$(cat /run/munge/munged.pid)" 2> /dev/null
  fi
  return 0
}
