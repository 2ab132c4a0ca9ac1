#!/usr/bin/env bash
# bench_tcp.sh VIT3D [ROUNDS]: the TCP world (parallel/comm_tcp*.c) against MPI, the same
# training in the same run: for each mesh of two ranks (dp 2: one gradient all-reduce per step;
# tp 2: four all-reduces of activations per block and micro-batch; pp 2: activations and
# gradients between the stages), an MPI run (mpirun) and a TCP run (launch/spawn.sh) in turn
# ROUNDS times (default 3); printed per mesh: the median step time of each (steps 3 on, median
# over rounds) and TCP / MPI. Both runs compute the same bits (every axis has two ranks), which
# the script checks. Two ranks, so that each has a core on a 2-core machine; Open MPI moves the
# bytes through shared memory, TCP through the loopback device.
set -uo pipefail
vit3d=$1
rounds=${2:-3}
py=${VT_REF_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
command -v mpirun > /dev/null || { echo "SKIP: no mpirun to compare with"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
model=(--model tiny --depth 8 --width 192 --heads 4 --img-size 64 --micro-batch-size 8
       --global-batch-size 32 --steps 12 --threads 1 --log-interval 100)
echo "bench_tcp: model tiny, depth 8, width 192, 64 px, micro-batch 8, global batch 32, 12" \
     "steps, 1 thread per rank, 2 ranks, $(nproc) cores, $rounds rounds"
echo "conditions: cpu '$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)'," \
     "$(mpirun --version 2>/dev/null | head -n 1)"
for mesh in "--dp 2" "--tp 2" "--pp 2"; do
  name=${mesh// /}
  for r in $(seq "$rounds"); do
    # shellcheck disable=SC2086
    mpirun -np 2 --oversubscribe "$vit3d" train "${model[@]}" $mesh \
      --log-dir "$work/${name}_mpi_$r" --final-weights "$work/${name}_mpi_$r.safetensors" \
      > "$work/${name}_mpi_$r.log" 2>&1 || { echo "FAIL: mpi $mesh"; exit 1; }
    # shellcheck disable=SC2086
    VT_WORLD=tcp "$here/../launch/spawn.sh" 2 "$vit3d" train "${model[@]}" $mesh \
      --log-dir "$work/${name}_tcp_$r" --final-weights "$work/${name}_tcp_$r.safetensors" \
      > "$work/${name}_tcp_$r.log" 2>&1 || { echo "FAIL: tcp $mesh"; exit 1; }
    cmp -s "$work/${name}_mpi_$r.safetensors" "$work/${name}_tcp_$r.safetensors" ||
      { echo "FAIL: $mesh: the TCP run's weights differ from the MPI run's"; exit 1; }
  done
  "$py" - "$work" "$name" "$mesh" "$rounds" <<'PY'
import json, statistics, sys
work, name, mesh, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ms = {}
for world in ("mpi", "tcp"):
    per = [statistics.median(json.loads(l)["step_ms"]
                             for l in list(open(f"{work}/{name}_{world}_{r}/metrics.jsonl"))[2:])
           for r in range(1, rounds + 1)]
    ms[world] = statistics.median(per)
    rounds_ms = " ".join(f"{x:.1f}" for x in per)
    print(f"{mesh:6s} {world}: step {ms[world]:.1f} ms (rounds {rounds_ms})")
print(f"{mesh:6s} step time tcp / mpi = {ms['tcp'] / ms['mpi']:.3f} (the same bits)")
PY
done
