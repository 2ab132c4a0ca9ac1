#!/bin/bash
# spawn.sh N COMMAND [ARGS...]: N ranks of COMMAND on this host without MPI, the way
# `torchrun --standalone --nproc-per-node N --no-python` starts them: each process gets RANK,
# LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR (127.0.0.1 unless set), MASTER_PORT
# (a free port unless set) and VT_RUN_ID (a fresh id on one host unless set), and vit3d's ranks
# meet over TCP (docs/operations.md "Without MPI").
# Several hosts: run it on each with NNODES (hosts), NODE_RANK (this host's index, 0 on
# MASTER_ADDR's host) and the same MASTER_ADDR and MASTER_PORT (and VT_RUN_ID, so that rank 0
# can tell its ranks from another run's on that port); ranks NODE_RANK * N + 0..N-1 start here.
# SIGTERM, SIGINT and SIGUSR1 are passed on to every rank. Exits with the first failing rank's
# code (0 when all succeed; of ranks seen ending together, one whose code is not 1, the code of
# the ranks that stop because another one is gone). A rank that fails ends the others by itself
# (they find it gone); any still running SPAWN_GRACE seconds later (default 60) are killed, and
# that is said.
set -u
source "$(dirname "$0")/common.sh"  # (vt_free_port)
if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: launch/spawn.sh N COMMAND [ARGS...]   (N ranks of COMMAND on this host)" >&2
  exit 2
fi
n=$1
shift
grace=${SPAWN_GRACE:-60}
nodes=${NNODES:-1} node=${NODE_RANK:-0}
if ! [[ $nodes =~ ^[1-9][0-9]*$ && $node =~ ^[0-9]+$ ]] || [ "$node" -ge "$nodes" ]; then
  echo "spawn.sh: NNODES=$nodes NODE_RANK=$node: give the number of hosts and this host's" \
    "index" >&2
  exit 2
fi
if [ "$nodes" -gt 1 ] && { [ -z "${MASTER_ADDR:-}" ] || [ -z "${MASTER_PORT:-}" ]; }; then
  echo "spawn.sh: with NNODES=$nodes set MASTER_ADDR (host of NODE_RANK 0) and MASTER_PORT" \
    "on every host" >&2
  exit 2
fi

export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
export MASTER_PORT=${MASTER_PORT:-$(vt_free_port)}
export WORLD_SIZE=$((n * nodes)) LOCAL_WORLD_SIZE=$n GROUP_RANK=$node
# The run's id: rank 0 turns away another run's ranks that reach its port. On one host a fresh
# one; across hosts the one given (the same VT_RUN_ID on every host), if any.
if [ -z "${VT_RUN_ID:-}" ] && [ "$nodes" -eq 1 ]; then
  export VT_RUN_ID="spawn-$(hostname)-$$-$RANDOM"
fi

# Bash starts background jobs with SIGINT ignored, and vit3d leaves an ignored SIGINT ignored
# (as under nohup): the ranks get it back (coreutils' env, 8.31 and later) so that the INT
# passed on below stops them.
default_int=()
env --default-signal=INT true 2>/dev/null && default_int=(env --default-signal=INT)
printf 'spawn.sh: %d ranks (world %d, node %d of %d) at %s:%s: ' "$n" "$WORLD_SIZE" "$node" \
  "$nodes" "$MASTER_ADDR" "$MASTER_PORT"
printf '%q ' "$@"
printf '\n'
declare -A rank_of=()
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$((node * n + r)) LOCAL_RANK=$r ${default_int[@]+"${default_int[@]}"} "$@" &
  pids+=($!)
  rank_of[$!]=$((node * n + r))
done
forward() { kill -s "$1" "${pids[@]}" 2>/dev/null; }
trap 'forward TERM' TERM
trap 'forward INT' INT
trap 'forward USR1' USR1

status=0 killer=
alive=("${pids[@]}")
# Polled rather than `wait -n`, which can miss a child that ends beside another and then wait
# forever: a rank that is gone is reaped with `wait PID`, which gives its exit code.
while [ ${#alive[@]} -gt 0 ]; do
  still=() first=0
  for pid in "${alive[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      still+=("$pid")
      continue
    fi
    wait "$pid"
    rc=$?
    [ "$rc" -ne 0 ] && echo "spawn.sh: rank ${rank_of[$pid]} exited with $rc" >&2
    [ "$rc" -ne 0 ] && { [ "$first" -eq 0 ] || [ "$first" -eq 1 ]; } && first=$rc
  done
  if [ "$first" -ne 0 ] && [ "$status" -eq 0 ]; then
    status=$first
    (
      sleep "$grace" > /dev/null 2>&1  # not holding the launcher's output open
      for p in "${pids[@]}"; do
        if kill -0 "$p" 2>/dev/null; then
          echo "spawn.sh: rank ${rank_of[$p]} still running ${grace} s after the first failure:" \
            "killing it" >&2
          kill -KILL "$p"
        fi
      done
    ) &
    killer=$!
  fi
  alive=("${still[@]+"${still[@]}"}")
  [ ${#alive[@]} -gt 0 ] && sleep 0.2
done
[ -n "$killer" ] && kill "$killer" 2>/dev/null
exit "$status"
