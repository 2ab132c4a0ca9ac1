#!/usr/bin/env bash
# test_tcp.sh VIT3D TEST_COMM [mpi|nompi]: the world without MPI (parallel/comm_tcp*.c), its
# ranks started the way torchrun starts them (launch/spawn.sh: RANK, WORLD_SIZE, MASTER_ADDR,
# MASTER_PORT):
#  1. test_comm over TCP: every collective of the comm API exact on two 8-rank meshes;
#  2. training over TCP is the MPI run's: 2x2x2 (every axis of two ranks, where any order of the
#     sum is the same sum) byte for byte as the same mesh under mpirun (for a vit3d built
#     without MPI (third argument nompi), mpirun's ranks meet over TCP too); two launchers of 4
#     ranks (NNODES=2) as one of 8; pp 4 under ZB-V (both channels, deferred sends) bit for bit
#     as one rank; pp 2 x dp 4 with ZeRO-1 and tp 4 x pp 2 with sequence parallelism (rings of
#     four sum in another order than Open MPI) within compare_runs.py's fp32 tolerances of one
#     rank;
#  3. SIGUSR1 to the launcher: every rank checkpoints and exits 75; the resumed run ends with the
#     uninterrupted run's bytes;
#  4. a rank that dies (VT_FAULT=crash) ends the others by themselves within seconds, each naming
#     the rank it lost; a rank that stalls gets the watchdog's report over the TCP side channel
#     (every rank's position) and exit 3; a rank that dies while rank 0 waits outside TCP (as
#     a GPU rank waits in a device op) is named gone by rank 0's watchdog at once (exit 3), and
#     one that stops on an error it reports ends every rank with its code (1);
#  5. bad launches stop with a message and exit 2: no MASTER_ADDR, ranks that disagree on the
#     world size, two processes with one rank, rank 0 or rank 1 never started (a named timeout),
#     another program on MASTER_PORT (rank 0 cannot listen, rank 1 is never answered: a named
#     timeout), a rank of another run (VT_RUN_ID) on rank 0's port (turned away; rank 0 trains
#     with its own), an unknown VT_WORLD; rank 0's MASTER_ADDR resolving otherwise on its host
#     trains (the side channel dials what the others resolved); SIGTERM while meeting exits 75
#     at once; SIGINT to spawn.sh reaches the ranks (exit 130, a checkpoint).
# Labels launch and tcp; mpirun only for the reference run, skipped without it.
set -uo pipefail
vit3d=$1
test_comm=$2
built=${3:-mpi}  # whether vit3d was built with MPI
py=${VT_REF_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
spawn=$here/../launch/spawn.sh
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: $py cannot import numpy"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
fail=0
bad() { echo "FAIL: $*"; fail=1; }
source "$here/../launch/common.sh"  # (vt_free_port)

# 1. The comm API.
if timeout 120 "$spawn" 8 "$test_comm" > "$work/comm.log" 2>&1 &&
    grep -q "8 ranks, transport tcp, .*: passed" "$work/comm.log"; then
  echo "ok: $(grep -o 'test_comm: .*' "$work/comm.log")"
else
  bad "test_comm over TCP"; tail -20 "$work/comm.log"
fi

# 2. Training.
common=(train --model tiny --heads 8 --depth 8 --width 64 --steps 5 --global-batch-size 16
        --micro-batch-size 2 --lr 1e-3 --warmup-steps 1 --seed 11 --threads 1 --log-interval 5)
tcp_run() {  # tcp_run NAME NP flags...: over TCP (one rank: a TCP world of one, no MPI at all)
  local name=$1 np=$2; shift 2
  VT_WORLD=tcp timeout 300 "$spawn" "$np" "$vit3d" "${common[@]}" --log-dir "$work/$name" \
    --final-weights "$work/$name/weights.safetensors" "$@" > "$work/$name.log" 2>&1 ||
    { bad "run $name ($*) did not complete:"; grep -m8 -iE "error|exited with|signal" \
        "$work/$name.log"; tail -5 "$work/$name.log"; return 1; }
}
same_bits() {  # same_bits A B LABEL: the same losses and the same weights, bit for bit
  "$py" "$here/compare_runs.py" "$work/$1" "$work/$2" "$3" > "$work/cmp.txt" || true
  if grep -q "loss worst rel 0.00e+00 .*parameters worst rel 0.00e+00" "$work/cmp.txt"; then
    echo "ok: $3: bit for bit"
  else
    bad "$3 differs"; cat "$work/cmp.txt"
  fi
}
close_to() {  # close_to A B LABEL: compare_runs.py's fp32 tolerances
  "$py" "$here/compare_runs.py" "$work/$1" "$work/$2" "$3" || bad "$3"
}
tcp_run base 1 && grep -q "world rank 0 of 1 (tcp)" "$work/base.log" ||
  bad "one rank: no TCP world of one"
tcp_run m222 8 --tp 2 --pp 2 --dp 2 && grep -q "world rank 0 of 8 (tcp)" "$work/m222.log" ||
  bad "2x2x2: not over TCP"
if command -v mpirun > /dev/null; then
  # Built without MPI, mpirun's ranks take Open MPI's variables and meet over TCP.
  world=mpi
  [ "$built" = nompi ] && world=tcp
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$(vt_free_port) \
    timeout 300 mpirun -np 8 --oversubscribe -x MASTER_ADDR -x MASTER_PORT "$vit3d" \
    "${common[@]}" --tp 2 --pp 2 --dp 2 --log-dir "$work/mpi222" \
    --final-weights "$work/mpi222/weights.safetensors" > "$work/mpi222.log" 2>&1 ||
    { bad "2x2x2 under mpirun"; tail -20 "$work/mpi222.log"; }
  if cmp -s "$work/m222/weights.safetensors" "$work/mpi222/weights.safetensors" &&
      grep -q "world rank 0 of 8 ($world)" "$work/mpi222.log"; then
    echo "ok: 2x2x2 over TCP == 2x2x2 under mpirun, world $world (final weights byte-identical)"
  else
    bad "2x2x2 over TCP differs from 2x2x2 under mpirun (world $world)"
  fi
else
  echo "skip: no mpirun for the 2x2x2 reference"
fi
close_to base m222 "tcp 2x2x2"
# Two "hosts" of four ranks each (spawn.sh with NNODES and NODE_RANK, as torchrun --nnodes).
port2=$(vt_free_port)
for node in 1 0; do
  NNODES=2 NODE_RANK=$node MASTER_ADDR=127.0.0.1 MASTER_PORT=$port2 timeout 300 "$spawn" 4 \
    "$vit3d" "${common[@]}" --tp 2 --pp 2 --dp 2 --log-dir "$work/nodes" \
    --final-weights "$work/nodes/weights.safetensors" > "$work/nodes$node.log" 2>&1 &
done
wait
if cmp -s "$work/m222/weights.safetensors" "$work/nodes/weights.safetensors" &&
    grep -q "world rank 5 of 8 (tcp)" "$work/nodes1.log"; then
  echo "ok: 2 x 4 ranks from two spawn.sh (NNODES=2) == 8 from one (byte-identical)"
else
  bad "two spawn.sh with NNODES=2"; tail -5 "$work/nodes0.log" "$work/nodes1.log"
fi
tcp_run zbv 4 --pp 4 --pp-schedule zb-v && same_bits base zbv "tcp pp 4 zb-v"
tcp_run zero 8 --pp 2 --dp 4 --zero 1 && close_to base zero "tcp pp 2 x dp 4 zero 1"
tcp_run sp 8 --tp 4 --pp 2 --sequence-parallel 1 && close_to base sp "tcp tp 4 x pp 2 sp"

# 3. Preemption: SIGUSR1 to the launcher, checkpoint, exit 75, resume.
long=(--steps 40 --save-interval 1000)
tcp_run whole 8 --tp 2 --pp 2 "${long[@]}"
VT_WORLD=tcp "$spawn" 8 "$vit3d" "${common[@]}" --tp 2 --pp 2 "${long[@]}" --save "$work/ck" \
  --log-dir "$work/pre" > "$work/pre.log" 2>&1 &
launcher=$!
for _ in $(seq 1 300); do
  grep -q "^step  *[0-9]*/40" "$work/pre.log" 2>/dev/null && break
  sleep 0.1
done
kill -USR1 "$launcher"
wait "$launcher"
rc=$?
if [ "$rc" -eq 75 ] && grep -q "preempted" "$work/pre.log"; then
  tcp_run resumed 8 --tp 2 --pp 2 "${long[@]}" --save "$work/ck" --resume auto
  at=$(grep -o 'preempted .* at step [0-9]*' "$work/pre.log" | grep -o '[0-9]*$' | head -1)
  if grep -q "resumed from .*step-0*$at:" "$work/resumed.log" &&
     cmp -s "$work/whole/weights.safetensors" "$work/resumed/weights.safetensors"; then
    echo "ok: SIGUSR1 -> checkpoint at $(grep -o 'preempted .* at step [0-9]*' "$work/pre.log" |
      grep -o '[0-9]*$' | head -1), exit 75; resumed == uninterrupted (byte-identical)"
  else
    bad "the resumed run differs from the uninterrupted one"
  fi
else
  bad "SIGUSR1: exit $rc"; tail -20 "$work/pre.log"
fi

# 4. A rank that dies, a rank that stalls.
t0=$SECONDS
VT_FAULT=crash@5:3 SPAWN_GRACE=60 timeout 120 "$spawn" 8 "$vit3d" "${common[@]}" --tp 2 --pp 2 \
  "${long[@]}" > "$work/crash.log" 2>&1
rc=$?
lost=$(grep -c "lost the connection to world rank" "$work/crash.log")
if [ "$rc" -ne 0 ] && [ "$lost" -ge 1 ] && ! grep -q "still running" "$work/crash.log"; then
  echo "ok: rank 5 crashed at step 3: every rank ended by itself in $((SECONDS - t0)) s" \
    "($lost ranks reported a lost peer; exit $rc)"
else
  bad "crash: exit $rc, $lost lost-peer messages"; tail -20 "$work/crash.log"
fi
VT_FAULT=stall@3:3 timeout 120 "$spawn" 8 "$vit3d" "${common[@]}" --tp 2 --pp 2 "${long[@]}" \
  --timeout-s 4 > "$work/stall.log" 2>&1
rc=$?
if [ "$rc" -eq 3 ] && grep -q "watchdog verdict" "$work/stall.log" &&
    ! grep -q "did not answer" "$work/stall.log"; then
  echo "ok: rank 3 stalled: the watchdog's report, every rank answering over TCP, exit 3"
else
  bad "stall: exit $rc"; grep -i "watchdog" "$work/stall.log" | head -20
fi

# A rank that dies while rank 0 waits outside any TCP operation (as a GPU rank waits inside a
# device one): rank 0's watchdog learns it from the side channel (no goodbye) and ends the job
# at once, long before --timeout-s.
t0=$SECONDS
VT_FAULT=stall@0:3,crash@1:3 SPAWN_GRACE=60 timeout 120 "$spawn" 4 "$vit3d" "${common[@]}" \
  --dp 4 "${long[@]}" --timeout-s 100 > "$work/gone.log" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q "spawn.sh: rank 0 exited with 3" "$work/gone.log" &&
   [ $((SECONDS - t0)) -lt 60 ] &&
   grep -q "rank 1: gone (its process ended without a goodbye" "$work/gone.log" &&
   grep -q "watchdog verdict: failed: rank 1 (gone)" "$work/gone.log"; then
  echo "ok: rank 1 died while rank 0 stalled: rank 0's watchdog named it gone and ended the" \
    "job in $((SECONDS - t0)) s (--timeout-s 100)"
else
  bad "a dead rank seen by the side channel: exit $rc"; grep -i "watchdog" "$work/gone.log" | head
fi

# The same with a rank that stops on an error it reports (VT_FAULT=error: a failed internal
# check, as a bad image under --bad-image fail): rank 0's watchdog ends the job with its exit
# code, 1, not as a crash.
VT_FAULT=stall@0:3,error@1:3 SPAWN_GRACE=60 timeout 120 "$spawn" 4 "$vit3d" "${common[@]}" \
  --dp 4 "${long[@]}" --timeout-s 100 > "$work/err.log" 2>&1
rc=$?
if [ "$rc" -eq 1 ] && grep -q "spawn.sh: rank 0 exited with 1" "$work/err.log" &&
   grep -q "world rank 1 stopped on an error (its own message says which)" "$work/err.log" &&
   ! grep -q "gone" "$work/err.log"; then
  echo "ok: rank 1 stopped on an error while rank 0 stalled: every rank exit 1, none called gone"
else
  bad "a rank's reported error over the side channel: exit $rc"; grep -i "watchdog\|spawn" "$work/err.log" | head
fi

# 5. Bad launches.
expect_error() {  # expect_error LABEL CODE PATTERN LOG: exit 2 (nothing ran) and the message
  if [ "$2" -eq 2 ] && grep -q "$3" "$4"; then
    echo "ok: $1: exit $2, \"$(grep -o "$3.*" "$4" | head -1 | cut -c1-110)\""
  else
    bad "$1: exit $2"; cat "$4" | head -10
  fi
}
env -u MASTER_ADDR -u MASTER_PORT RANK=0 WORLD_SIZE=2 timeout 60 "$vit3d" "${common[@]}" \
  > "$work/noaddr.log" 2>&1
expect_error "no MASTER_ADDR" $? "do not say where" "$work/noaddr.log"
port=$(vt_free_port)
export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port VT_CONNECT_TIMEOUT=2
three() {  # three NAME R:S R:S: ranks R of world size S beside a rank 0 of 3; rank 0's exit
  local name=$1 r s
  shift
  for rs in "$@"; do
    r=${rs%:*} s=${rs#*:}
    RANK=$r WORLD_SIZE=$s timeout 60 "$vit3d" "${common[@]}" > "$work/$name$r.log" 2>&1 &
  done
  RANK=0 WORLD_SIZE=3 timeout 60 "$vit3d" "${common[@]}" > "$work/${name}0.log" 2>&1
  local rc=$?
  wait
  return $rc
}
three size 1:3 2:4
expect_error "world sizes disagree" $? "says the world has 4 ranks, rank 0 says 3" \
  "$work/size0.log"
three dup 1:3 1:3
expect_error "two processes with rank 1" $? "two processes say they are world rank 1" \
  "$work/dup0.log"
# (waiting without a busy loop: its pauses reach a second; a pause of 1 s was EINVAL in
# nanosleep, and the rank spun on connect, a core's CPU time for the whole wait)
TIMEFORMAT='%U %S'
cpu=$( { time { VT_CONNECT_TIMEOUT=4 RANK=1 WORLD_SIZE=2 timeout 60 "$vit3d" "${common[@]}" \
         > "$work/norank0.log" 2>&1; echo $? > "$work/norank0.rc"; }; } 2>&1 )
expect_error "rank 0 never started" "$(cat "$work/norank0.rc")" "cannot reach rank 0 at 127.0.0.1:$port within 4 s" \
  "$work/norank0.log"
awk -v c="$cpu" 'BEGIN { split(c, t, " "); exit !(t[1] + t[2] < 1.0) }' &&
  echo "ok: waiting 4 s for rank 0 took $cpu s of user and system CPU time" ||
  bad "waiting 4 s for rank 0 took $cpu s of user and system CPU time (a busy loop)"
RANK=0 WORLD_SIZE=2 timeout 60 "$vit3d" "${common[@]}" > "$work/alone.log" 2>&1
expect_error "rank 1 never started" $? "only 1 of 2 ranks reached" "$work/alone.log"
# Another program listening on MASTER_PORT: rank 0 cannot take it, and rank 1, whose
# connection that program holds without a word, gives up after twice VT_CONNECT_TIMEOUT.
export MASTER_PORT=$(vt_free_port)
"$py" -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
open(sys.argv[2], "w").close(); time.sleep(60)' "$MASTER_PORT" "$work/held" &
holder=$!
for i in $(seq 100); do [ -e "$work/held" ] && break; sleep 0.1; done
RANK=1 WORLD_SIZE=2 timeout 60 "$vit3d" "${common[@]}" > "$work/held1.log" 2>&1 &
rank1=$!
RANK=0 WORLD_SIZE=2 timeout 60 "$vit3d" "${common[@]}" > "$work/held0.log" 2>&1
expect_error "MASTER_PORT held by another program (rank 0)" $? \
  "rank 0 cannot listen on port $MASTER_PORT (MASTER_PORT)" "$work/held0.log"
wait $rank1
expect_error "MASTER_PORT held by another program (rank 1)" $? \
  "took the connection but sent no table of ranks within 4 s" "$work/held1.log"
kill $holder 2> /dev/null
wait $holder 2> /dev/null
# Two runs on one port: rank 0 of run a turns away rank 1 of run b (which says so and exits 2)
# and trains with its own rank 1 (which starts after run b's rank 1 ended: rank 0 waits up to
# 30 s for it).
export MASTER_PORT=$(vt_free_port)
VT_CONNECT_TIMEOUT=30 VT_RUN_ID=a RANK=0 WORLD_SIZE=2 timeout 60 "$vit3d" "${common[@]}" \
  > "$work/runa0.log" 2>&1 &
rank0=$!
VT_RUN_ID=b RANK=1 WORLD_SIZE=2 timeout 60 "$vit3d" "${common[@]}" > "$work/runb1.log" 2>&1
expect_error "a rank of another run on MASTER_PORT" $? \
  "closed the connection before sending the table of ranks: it turned this rank away" \
  "$work/runb1.log"
VT_RUN_ID=a RANK=1 WORLD_SIZE=2 timeout 60 "$vit3d" "${common[@]}" > "$work/runa1.log" 2>&1
rc=$?
wait $rank0
rc0=$?
if [ $rc0 = 0 ] && [ $rc = 0 ] &&
   grep -q "world rank 1 of 2 ranks (host .*) of another run connected to MASTER_PORT" \
     "$work/runa0.log"; then
  echo "ok: rank 0 of run a turned run b's rank 1 away (warned) and trained with its own"
else
  bad "two runs on one port: rank 0 and 1 of run a: exit $rc0 and $rc"; tail -5 "$work/runa0.log"
fi
VT_WORLD=nccl timeout 60 "$vit3d" "${common[@]}" > "$work/mode.log" 2>&1
expect_error "VT_WORLD=nccl" $? "VT_WORLD=nccl: use mpi, tcp or auto" "$work/mode.log"
# Rank 0's MASTER_ADDR resolved another way on its own host (as a host name in /etc/hosts that
# points at a loopback address there): the other ranks keep dialling what they resolved, the
# watchdog's side channel too (it used rank 0's own lookup, and the run died at start-up).
export MASTER_PORT=$(vt_free_port)
VT_CONNECT_TIMEOUT=10 MASTER_ADDR=192.0.2.1 RANK=0 WORLD_SIZE=2 timeout 60 "$vit3d" \
  "${common[@]}" > "$work/addr0.log" 2>&1 &
rank0=$!
VT_CONNECT_TIMEOUT=10 RANK=1 WORLD_SIZE=2 timeout 60 "$vit3d" "${common[@]}" \
  > "$work/addr1.log" 2>&1
rc=$?
wait $rank0
rc0=$?
[ $rc0 = 0 ] && [ $rc = 0 ] && echo "ok: rank 0 with another MASTER_ADDR of its own: trained" ||
  { bad "rank 0 with another MASTER_ADDR: exit $rc0 and $rc"; tail -3 "$work/addr1.log"; }
# A stop signal while the ranks meet ends a rank at once (exit 75 for SIGTERM), not after
# VT_CONNECT_TIMEOUT.
export MASTER_PORT=$(vt_free_port)
VT_CONNECT_TIMEOUT=60 RANK=1 WORLD_SIZE=2 timeout 60 "$vit3d" "${common[@]}" \
  > "$work/meetterm.log" 2>&1 &
lone=$!
for _ in $(seq 100); do  # until vit3d (timeout's child) catches SIGTERM (bit 15 of SigCgt)
  child=$(pgrep -P $lone | head -1)
  cgt=$([ -n "$child" ] && awk '/^SigCgt:/ {print $2}' "/proc/$child/status" 2>/dev/null)
  [ -n "$cgt" ] && (( 0x$cgt & 0x4000 )) && break
  sleep 0.1
done
sleep 0.3  # (and is meeting: the handlers come first)
t0=$SECONDS
kill -TERM $lone
wait $lone
rc=$?
if [ $rc = 75 ] && [ $((SECONDS - t0)) -le 5 ] &&
   grep -q "Terminated while the ranks were meeting" "$work/meetterm.log"; then
  echo "ok: SIGTERM while meeting: exit 75 within $((SECONDS - t0)) s"
else bad "SIGTERM while meeting: exit $rc after $((SECONDS - t0)) s"; cat "$work/meetterm.log"; fi
# interrupt NAME TARGET WHAT [setsid]: a 2-rank run started by spawn.sh (in a session of its
# own with setsid), SIGINT to TARGET (the launcher's pid, or -pid: its process group) once it
# trains; the ranks must save and exit 130.
interrupt() {
  local name=$1 target=$2 what=$3 launcher
  ${4:+setsid} env --default-signal=INT VT_WORLD=tcp "$spawn" 2 "$vit3d" "${common[@]}" --dp 2 \
    --steps 100000 --save "$work/ck$name" --save-interval 100000 > "$work/$name.log" 2>&1 &
  launcher=$!
  for _ in $(seq 1 300); do
    grep -q "^step  *[0-9]*/100000" "$work/$name.log" 2>/dev/null && break
    sleep 0.1
  done
  kill -INT -- "${target/pid/$launcher}"
  wait $launcher
  local rc=$?
  if [ $rc = 130 ] && grep -q "interrupted (SIGINT on some rank) at step" "$work/$name.log" &&
     [ -f "$work/ck$name/latest" ]; then
    echo "ok: $what: the ranks saved and exited 130"
  else bad "$what: exit $rc"; tail -5 "$work/$name.log"; fi
}
unset MASTER_PORT
# SIGINT to spawn.sh (Ctrl-C) reaches the ranks, whose background start ignored it: each saves
# and exits 130. (The launcher itself, started in the background here, gets SIGINT back too.)
interrupt int pid "SIGINT to spawn.sh"
# A terminal's Ctrl-C goes to the whole process group: each rank gets it from the terminal and
# again from spawn.sh; the second, within a second, is the same Ctrl-C (it used to kill the
# ranks without a checkpoint, exit 130 all the same).
interrupt pg -pid "Ctrl-C to spawn.sh's process group (setsid: the launcher leads it)" setsid

# A rank whose node lacks the dataset (hidden here by a mount namespace of its own) is named at
# start-up, exit 2, where it skipped every file as bad and blamed the classes.
mkdir -p "$work/ds"
if "$py" "$here/make_images.py" "$work/ds" 2 4 32 > /dev/null 2>&1 &&
   "$vit3d" --version | grep -qv "PNG none" && unshare -m true 2>/dev/null; then
  hidden() {  # hidden MESH_FLAG: two ranks, rank 1's dataset hidden; rc0 and rc1 set
    export MASTER_PORT=$(vt_free_port)
    local args=(train --model tiny --num-classes 2 --data "$work/ds" --threads 1 --steps 2 "$1"
                2 --global-batch-size 4 --micro-batch-size 2)
    RANK=0 WORLD_SIZE=2 timeout 60 "$vit3d" "${args[@]}" > "$work/ds0.log" 2>&1 &
    RANK=1 WORLD_SIZE=2 timeout 60 unshare -m sh -c 'mount -t tmpfs none "$0" && exec "$@"' \
      "$work/ds" "$vit3d" "${args[@]}" > "$work/ds1.log" 2>&1
    rc1=$?
    wait $!
    rc0=$?
    unset MASTER_PORT
  }
  hidden --dp
  if [ $rc0 = 2 ] && [ $rc1 = 2 ] &&
     grep -q "world rank 1 (host .*) cannot read .* of the dataset .*, which world rank 0 listed: No such file or directory. The ranks of the first pipeline stage read their share of the files: the dataset must be at the same path on each of their nodes" "$work/ds1.log" &&
     ! grep -q "bad image" "$work/ds1.log"; then
    echo "ok: a rank that cannot see --data is named at start-up, exit 2"
  else bad "a rank without the dataset: exit $rc0 and $rc1"; tail -3 "$work/ds0.log" "$work/ds1.log"; fi
  # ... but a later pipeline stage, which reads no image (the labels come with the listing),
  # trains without it.
  hidden --pp
  [ $rc0 = 0 ] && [ $rc1 = 0 ] && grep -q "^step     2/2" "$work/ds0.log" &&
    echo "ok: a later pipeline stage without the dataset trains (--pp 2)" ||
    { bad "a later stage without the dataset: exit $rc0 and $rc1"; tail -3 "$work/ds0.log" "$work/ds1.log"; }
else
  echo "skipped the missing-dataset case: no images or no mount namespace here (unshare -m)"
fi

# TP groups across hosts (each rank's host name its own, by a UTS namespace): tp 2 of ranks on
# hosts n1 n1 n2 n2 stays inside them, silent; on n1 n2 n1 n2 both groups span two, warned.
if unshare -u true 2>/dev/null; then
  for layout in "1 1 2 2" "1 2 1 2"; do
    export MASTER_PORT=$(vt_free_port)
    read -r -a hosts <<<"$layout"
    for r in 0 1 2 3; do
      RANK=$r WORLD_SIZE=4 timeout 60 unshare -u sh -c 'hostname "$0" && exec "$@"' \
        "n${hosts[$r]}" "$vit3d" train --model tiny --threads 1 --steps 1 --tp 2 --dp 2 \
        > "$work/tphost$r.log" 2>&1 &
    done
    wait
    warned=$(cat "$work"/tphost*.log | grep -c "2 of the 2 tensor-parallel groups span more than one host")
    want=$([ "$layout" = "1 1 2 2" ] && echo 0 || echo 1)
    [ "$warned" = "$want" ] && echo "ok: hosts $layout, tp 2: $want warning(s) of TP groups across hosts" ||
      bad "hosts $layout, tp 2: $warned warnings of TP groups across hosts, want $want"
  done
  unset MASTER_PORT
else
  echo "skipped the TP-across-hosts case: no UTS namespace here (unshare -u)"
fi

[ $fail = 0 ] && echo "test_tcp: all passed" || echo "test_tcp: FAILED"
exit $fail
