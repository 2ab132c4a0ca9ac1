#!/bin/sh
# bench_cpu.sh: CPU benchmark (CTest label `bench`, not pass/fail): vit3d's ViT-Ti/16 training step
# against PyTorch eager, same model, batch and threads, in alternating rounds so machine noise
# hits both. Prints both medians, the ratio torch/vit3d (>1: vit3d faster) and the conditions;
# then vit3d's linear probe (--trainable '^head\.', whose backward skips the frozen blocks)
# against its full step, also in alternating rounds.
# Usage: bench_cpu.sh BENCH_CPU_BINARY [BUILD_TYPE]. Env: VT_BENCH_BATCH (64), VT_BENCH_THREADS
# (cores), VT_BENCH_WARMUP (1), VT_BENCH_STEPS (3), VT_BENCH_ROUNDS (2), PYTHON (/usr/bin/python3).
set -u
bin=${1:?usage: bench_cpu.sh BENCH_CPU_BINARY [BUILD_TYPE]}
build_type=${2:-unknown}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-/usr/bin/python3}
batch=${VT_BENCH_BATCH:-64}
cores=$(nproc --all)  # (plain nproc obeys OMP_NUM_THREADS, set below or by the caller)
threads=${VT_BENCH_THREADS:-$cores}
warmup=${VT_BENCH_WARMUP:-1}
steps=${VT_BENCH_STEPS:-3}
rounds=${VT_BENCH_ROUNDS:-2}
# Both sides get the same thread budget for OpenMP and OpenBLAS (vit3d also sets it in code).
export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"

torch_why=""
if ! out=$("$py" -c 'import torch' 2>&1); then
  torch_why="cannot import torch with $py: $(printf '%s' "$out" | tail -n 1)"
fi

log=$(mktemp) || exit 1
trap 'rm -f "$log" "$log.one"' EXIT
# Runs one side, shows its lines and keeps them; a crash fails the benchmark.
run_side() {
  "$@" >"$log.one" || { cat "$log.one"; echo "failed: $*"; exit 1; }
  tee -a "$log" <"$log.one"
}
r=1
while [ "$r" -le "$rounds" ]; do
  run_side "$bin" "$batch" "$threads" "$warmup" "$steps"
  [ -z "$torch_why" ] && run_side "$py" "$here/bench_torch.py" "$batch" "$threads" "$warmup" "$steps"
  run_side env VT_BENCH_PROBE=1 "$bin" "$batch" "$threads" "$warmup" "$steps"
  r=$((r + 1))
done

# Median of the per-round medians, and the best single step, for one side.
summary() {
  grep "^$1 step_ms" "$log" | sed 's/.*median=\([0-9.]*\) min=\([0-9.]*\).*/\1 \2/' |
    sort -n | awk '{ m[NR] = $1; if (NR == 1 || $2 < lo) lo = $2 }
      END { if (!NR) exit 1; med = NR % 2 ? m[(NR + 1) / 2] : (m[NR / 2] + m[NR / 2 + 1]) / 2;
            printf "%.1f %.1f\n", med, lo }'
}
blas_of() { ldd "$1" 2>/dev/null | awk '/blas/ { print $3; exit }' | xargs -r readlink -f; }
torch_lib=$("$py" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))' 2>/dev/null)

vit=$(summary vit3d)
vit_med=${vit% *} vit_min=${vit#* }
echo "== CPU benchmark: ViT-Ti/16, 224 px, fp32, one training step (AdamW, clipping)"
echo "conditions: cpu='$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)' cores=$cores threads=$threads batch=$batch warmup=$warmup steps=$steps rounds=$rounds build=$build_type load='$(cut -d' ' -f1-3 /proc/loadavg)'"
# Thread-pool settings change the result a lot (OpenMP spin-waiting against OpenBLAS's threads).
echo "env: $(env | grep -E '^(OMP_|GOMP_|OPENBLAS_|KMP_)' | sort | tr '\n' ' ')"
echo "blas: vit3d=$(blas_of "$bin") torch=${torch_lib:+$(blas_of "$torch_lib")}"
echo "vit3d: median ${vit_med} ms/step, best ${vit_min} ms"
probe=$(summary probe)
echo "vit3d linear probe (--trainable '^head\\.'): median ${probe% *} ms/step, best ${probe#* } ms"
awk -v f="$vit_med" -v p="${probe% *}" 'BEGIN { printf "ratio full step / linear probe: median %.2f (the probe runs the forward, the head and its update)\n", f / p }'
if [ -n "$torch_why" ]; then
  echo "torch: not measured: $torch_why"
  exit 0
fi
tor=$(summary torch)
tor_med=${tor% *} tor_min=${tor#* }
echo "torch: median ${tor_med} ms/step, best ${tor_min} ms (eager, $("$py" -c 'import torch; print(torch.__version__)'))"
awk -v t="$tor_med" -v v="$vit_med" -v tb="$tor_min" -v vb="$vit_min" 'BEGIN {
  printf "ratio torch/vit3d: median %.2f, best %.2f (>1 means vit3d is faster)\n", t / v, tb / vb }'
