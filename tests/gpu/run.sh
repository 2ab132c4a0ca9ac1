#!/usr/bin/env bash
# tests/gpu/run.sh: the one prepared script for a lent GPU machine (one H200, a few minutes of
# device time per task; this script plans for 8 minutes at most). Parts, in order, each with its
# own timeout inside one overall deadline (VT_GPU_BUDGET_S, default 470 s):
#   1. build vit3d with CUDA for sm_90 (MPI, OpenBLAS, libpng, stb_image only where present;
#      NCCL from the CUDA toolkit, else from PyTorch's nvidia-nccl wheel)
#   2. the cuda-labelled tests (ctest -L cuda: every op on CUDA against the CPU backend), then
#      the attention's kernel variants against each other (the same bits required)
#   3. 100 training steps of the tiny model with drop path, same seed and synthetic data: on
#      CUDA in bf16 (twice: the same bits are required) and fp32, on the CPU in bf16 (the twin)
#      and fp32; the loss curves compared (tests/compare_curves.py); then 20 bf16 steps of the
#      model variants (LayerScale, registers, QK-norm, no qkv bias, dropout; parallel blocks
#      with LAMB and BCE on binary targets) on both
#   4. ViT-B/16 at 224 px, bf16 (and fp32 when time allows), on CUDA: bench_gpu (one
#      device-resident batch) and the trainer's own metrics line (images/s, MFU with --peak-tflops
#      989), against timm's vit_base_patch16_224 in PyTorch (bf16 autocast, AdamW, same batch),
#      eager; ViT-L/16 (bench_gpu against timm's vit_large_patch16_224, eager); then ViT-B's
#      torch.compile, measured in the same run when python3 imports torch and timm; then, as
#      time allows: the time per op (bench_gpu --ops; the mma.sync attention's variants, 64 or
#      128 rows a block and dS stored or made again, as its first calls timed them), again with the
#      WMMA attention (VT_ATTN_MMA=0), the LayerNorm backward in two passes (VT_LN_FUSED=0), the
#      linear forward on the cuBLAS path (VT_CUBLASLT=0) and with cuBLASLt's algorithms timed
#      (VT_CUBLASLT_TUNE=8); the Linears' GEMMs alone against a square one (bench_gemm:
#      cublasGemmEx and cuBLASLt's algorithms); Nsight Compute's counters for the attention,
#      LayerNorm, activation and column-sum kernels and the first forward GEMMs (a line per kernel
#      in the summary), most important first; ViT-H/14's attention (D = 80) on mma.sync against
#      WMMA
#   5. compute-sanitizer memcheck and racecheck of the op test, with the time that is left
#   6. a summary (also in $OUT/summary.txt), its first line the GPU, the commit (VT_COMMIT where
#      the tree came without .git) and torch/timm; a failed build goes straight to it
# Logs go to $OUT when set (the device tool brings back at most 8 files: these are 7: build.log,
# ctest.log, train.log (with the two compared curves), bench.log, torch.log, trace_bench.json,
# summary.txt),
# else to ./gpu_out. Usage: tests/gpu/run.sh [--cpu-only]
#   --cpu-only needs no GPU: builds without CUDA, compares two CPU training runs with the same
#   code, runs bench_gpu --cpu and the torch script on a small model on the CPU (if torch and timm
#   import): a dry run of this script on a development machine.
# Env: VT_GPU_BUILD build directory (default build_gpu in the working tree, /tmp/vt_gpu_build_cpu
#   with --cpu-only; an existing one is reused),
#   VT_GPU_BUDGET_S, VT_GPU_SLOW (1; multiplies each part's time limit, for slow dry-run
#   machines), VT_BENCH_BATCH (128), VT_BENCH_BATCH_L (64, ViT-L), VT_PYTHON (python3),
#   VT_GPU_COMPILE (1; 0 skips torch.compile, a minute or two, for a rerun that has its figure),
#   VT_GPU_PARTS (all; else a comma list of tests, train, bench (with the PyTorch peer), vitl,
#   ops (per-op times and the A/Bs), gemm (tests/gpu/bench_gemm.cu), ncu, vith (ViT-H/14's
#   attention, mma.sync against WMMA),
#   san: a second call on a warm machine that reuses the build, e.g. VT_GPU_PARTS=ops,ncu).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cpu_only=0
[[ ${1:-} == --cpu-only ]] && cpu_only=1
out=${OUT:-$PWD/gpu_out}
mkdir -p "$out"
work=$(mktemp -d /tmp/vt_gpu_run.XXXXXX)
# On the GPU machine the build goes inside the working tree (build*/ is ignored by git), where
# the device tool keeps ignored outputs between calls: a second call reuses it.
build=${VT_GPU_BUILD:-$( ((cpu_only)) && echo /tmp/vt_gpu_build_cpu || echo "$root/build_gpu")}
budget=${VT_GPU_BUDGET_S:-470}
bb=${VT_BENCH_BATCH:-128}
py=${VT_PYTHON:-python3}
slow=${VT_GPU_SLOW:-1}  # multiplies every part's time limit (a slow dry-run machine)
[[ $slow =~ ^[1-9][0-9]*$ ]] || { echo "VT_GPU_SLOW=$slow: give a whole number (1, 2, ...)"; exit 2; }
jobs=$(nproc)
t_start=$SECONDS
gdev=cuda
((cpu_only)) && gdev=cpu  # the "GPU" side of the comparisons in a dry run

left() { echo $((budget - (SECONDS - t_start))); }
# part NAME: whether VT_GPU_PARTS asks for that part (all when unset).
part() { [[ -z ${VT_GPU_PARTS:-} || ,$VT_GPU_PARTS, == *,$1,* ]]; }
# cap LIMIT [RESERVE]: LIMIT (times VT_GPU_SLOW) seconds, or less so that RESERVE seconds stay
# for what follows.
cap() {
  local l=$(($(left) - ${2:-15})) want=$(($1 * slow))
  ((l < 1)) && l=1
  ((l < want)) && echo "$l" || echo "$want"
}
summary=()
note() {
  summary+=("$*")
  echo "== $*"
}
# Runs "$@" under timeout T, appending to log L; says when it was the timeout that ended it.
run() {
  local t=$1 log=$2
  shift 2
  echo "\$ $*" >>"$log"
  timeout -k 5 "$t" "$@" >>"$log" 2>&1
  local rc=$?
  ((rc == 124 || rc == 137)) && echo "(timed out after ${t}s)" >>"$log"
  return $rc
}

# ---- 0. the machine -----------------------------------------------------------------------------
blog=$out/build.log
: >"$blog"
{
  echo "run.sh $(date -u +%FT%TZ) cpu_only=$cpu_only budget=${budget}s jobs=$jobs"
  git -C "$root" log -1 --format='commit %h %s' 2>/dev/null
  git -C "$root" status --short 2>/dev/null | head -20
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  command -v nvcc >/dev/null && nvcc --version | tail -1
  /usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -1
  "$py" -c 'import torch, timm; print("torch", torch.__version__, "timm", timm.__version__)' 2>&1 | tail -1
} >>"$blog" 2>&1
# The conditions, first in the summary: the GPU, its driver, the commit (VT_COMMIT where the
# working tree came without .git), torch and timm.
gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
commit=$(git -C "$root" log -1 --format=%h 2>/dev/null || true)
note "machine: ${gpu_name:-no GPU (nvidia-smi)}; commit ${commit:-${VT_COMMIT:-unknown}}; $("$py" -c 'import torch, timm; print("torch", torch.__version__, "timm", timm.__version__)' 2>/dev/null || echo "no torch/timm")"
if ((!cpu_only)) && ! command -v nvidia-smi >/dev/null; then
  echo "no nvidia-smi: is this a GPU machine? (use --cpu-only for a dry run)" | tee -a "$blog"
fi

# ---- 1. build -------------------------------------------------------------------------------------
args=(-DCMAKE_BUILD_TYPE=Release)
if ((cpu_only)); then
  args+=(-DVT_CUDA=OFF)
else
  export PATH=$PATH:/usr/local/cuda/bin
  args+=(-DVT_CUDA=ON -DVT_CUDA_ARCHS=90)
  # NCCL: the trainer's device comms need it even for one rank (parallel/comm.c). Toolkit first;
  # else the nvidia-nccl wheel PyTorch brings (its lib has only libnccl.so.2, so name it).
  if [[ ! -f /usr/local/cuda/include/nccl.h && ! -f /usr/include/nccl.h ]]; then
    nd=$("$py" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
    lib=$(ls "$nd"/lib/libnccl.so* 2>/dev/null | head -1)
    if [[ -n $nd && -f $nd/include/nccl.h && -n $lib ]]; then
      args+=(-DVT_NCCL_INCLUDE="$nd/include" -DVT_NCCL_LIB="$lib")
      export LD_LIBRARY_PATH=$nd/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      echo "NCCL from $nd" >>"$blog"
    else
      echo "no NCCL found: vit3d train --device cuda will stop (comm.c needs NCCL)" >>"$blog"
    fi
  fi
fi
command -v mpicc >/dev/null || args+=(-DVT_MPI=OFF)  # CMake drops BLAS/PNG/STB/JPEG itself
gen=()
[[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null && gen=(-G Ninja)
built=0
if run "$(cap 60 300)" "$blog" cmake -S "$root" -B "$build" "${gen[@]}" "${args[@]}" &&
  run "$(cap 300 240)" "$blog" cmake --build "$build" -j "$jobs" --target vit3d test_cuda_ops bench_gpu \
    $( ((cpu_only)) || echo bench_gemm); then
  built=1
  note "build: ok in $((SECONDS - t_start)) s ($(grep -E 'VT_(CUDA|NCCL|MPI|BLAS) ' "$blog" | tail -4 | awk '{printf "%s=%s ", $2, $3}'))"
else
  note "build: FAILED (see build.log)"
  tail -30 "$blog"
fi
vit3d=$build/vit3d
bench=$build/tests/bench_gpu
# summary_and_exit RC: part 6 (the summary), then the end.
summary_and_exit() {
  {
    echo
    echo "==== tests/gpu/run.sh summary ($((SECONDS - t_start)) s of ${budget} s) ===="
    printf '%s\n' "${summary[@]}"
  } | tee "$out/summary.txt"
  rm -rf "$work"
  exit "$1"
}
# Without a build nothing below can run: the PyTorch peer alone would spend minutes of the
# device's time on figures with nothing to compare them to.
((built)) || summary_and_exit 1

# ---- 2. the cuda-labelled tests ---------------------------------------------------------------------
clog=$out/ctest.log
: >"$clog"
if ((built)) && part tests; then
  sel=(-L cuda)
  ((cpu_only)) && sel=(-R cuda_ops_harness)
  # Only cuda_ops was built above; other cuda-labelled tests, if any, need the other targets.
  if ctest --test-dir "$build" -N "${sel[@]}" | grep -E 'Test +#' | grep -qv 'cuda_ops'; then
    run "$(cap 120 300)" "$blog" cmake --build "$build" -j "$jobs" || echo "(not every target built)" >>"$blog"
  fi
  run "$(cap 150 240)" "$clog" ctest --test-dir "$build" "${sel[@]}" -V --timeout 140
  crc=$?
  grep -E "(fp32|bf16) .*(FAIL|DIFFERS)|checks, .* failed|SKIP:|Not Run|Failed" "$clog" | head -40
  verdict=$( ((crc == 0)) && echo ok || echo "FAILED (rc $crc)")
  ((crc == 124 || crc == 137)) && verdict="TIMED OUT (no verdict; rerun with VT_GPU_PARTS=tests)"
  grep -q "SKIP:" "$clog" && verdict="SKIPPED (no usable GPU: $(grep -m1 -oE 'SKIP:.*' "$clog"))"
  note "ctest ${sel[*]}: $verdict - $(grep -E 'tests passed|tests failed' "$clog" | tail -1); $(grep -oE '[0-9]+ checks, .* failed.*' "$clog" | tail -1)"
  # The bf16 attention with D <= 64 runs on mma.sync kernels whose fragment layouts were only
  # emulated before a GPU ran them (src/cuda/attention_mma.cu); when the op test fails (or dies) and
  # its attention rows alone fail too, one rerun with the WMMA kernels (VT_ATTN_MMA=0) says
  # whether they are the cause, and if so the rest of this script runs without them.
  timed_out=$((crc == 124 || crc == 137))
  if ((crc != 0 && !timed_out && !cpu_only)) &&
    ! run "$(cap 60 200)" "$clog" "$build/tests/test_cuda_ops" attention_fwd attention_bwd; then
    if run "$(cap 60 200)" "$clog" env VT_ATTN_MMA=0 "$build/tests/test_cuda_ops" attention_fwd \
      attention_bwd; then
      export VT_ATTN_MMA=0
      note "the attention rows pass with VT_ATTN_MMA=0: the mma.sync kernels are wrong here; the rest runs without them"
    else
      note "the attention rows fail with VT_ATTN_MMA=0 too: not (only) the mma.sync kernels"
    fi
  fi
  # The mma.sync attention's variants (attention.cu's variant_for) must make the same bits on
  # the GPU as on the emulation (tests/test_attention_variants.sh): the backward's dS made again
  # in the dq kernel from S = Q K^T on 64-row blocks, and stored from the dk/dv kernel's S^T =
  # K Q^T on 128-row blocks; the op test's lines (the bits' hashes included) compared.
  if ((crc == 0 && !cpu_only)) && [[ ${VT_ATTN_MMA:-1} != 0 ]] && ! grep -q "SKIP:" "$clog"; then
    va=$out/variant_a.txt vb=$out/variant_b.txt
    run "$(cap 60 200)" "$va" env VT_ATTN_ROWS=64 VT_ATTN_DS=0 "$build/tests/test_cuda_ops" \
      attention_fwd attention_bwd
    run "$(cap 60 200)" "$vb" env VT_ATTN_ROWS=128 VT_ATTN_DS=1 "$build/tests/test_cuda_ops" \
      attention_fwd attention_bwd
    if cmp -s <(tail -n +2 "$va") <(tail -n +2 "$vb") && grep -q 'checks, 0 failed' "$va"; then
      note "attention variants (64 rows, dS made again; 128 rows, dS stored): the same bits"
    else
      note "attention variants DIFFER or fail (64 rows, dS made again; 128 rows, stored): ctest.log"
      diff "$va" "$vb" | head -20
    fi
    { echo "==== attention variants ===="; diff "$va" "$vb"; cat "$va"; } >>"$clog"
    rm -f "$va" "$vb"
  fi
  # The LayerNorm backward makes its parameter partials in the input gradient's pass
  # (src/cuda/layernorm.cu, first run on a GPU after 2026-12-04); when its rows fail, one rerun
  # with two passes (VT_LN_FUSED=0) says whether the fused kernel is the cause, and if so the
  # rest of this script runs without it.
  if ((crc != 0 && !timed_out && !cpu_only)) && grep -qE "layernorm_bwd(_add)? .*FAIL" "$clog"; then
    if run "$(cap 60 200)" "$clog" env VT_LN_FUSED=0 "$build/tests/test_cuda_ops" layernorm_bwd \
      layernorm_bwd_add; then
      export VT_LN_FUSED=0
      note "the LayerNorm backward rows pass with VT_LN_FUSED=0: the fused kernel is wrong here; the rest runs without it"
    else
      note "the LayerNorm backward rows fail with VT_LN_FUSED=0 too: not (only) the fused kernel"
    fi
  fi
  # The bf16 linear with a bias goes through cuBLASLt (src/cuda/gemm.cu); when its rows fail, one
  # rerun on the cuBLAS path says whether cuBLASLt is the cause, and if so the rest of this script
  # runs without it, so the training and benchmark figures still come.
  if ((crc != 0 && !timed_out && !cpu_only)) && grep -qE "bf16 linear(_act|_residual)?_fwd .*FAIL" "$clog"; then
    if run "$(cap 60 200)" "$clog" env VT_CUBLASLT=0 "$build/tests/test_cuda_ops"; then
      export VT_CUBLASLT=0
      note "the op test passes with VT_CUBLASLT=0: cuBLASLt's bias epilogue is wrong here; the rest runs without it"
    else
      note "the op test fails with VT_CUBLASLT=0 too: not (only) cuBLASLt"
    fi
  fi
fi

# ---- 3. training: CUDA and CPU in both precisions, the loss curves compared ------------------------
tlog=$out/train.log
: >"$tlog"
if ((built)) && part train; then
  targs=(train --model tiny --data synthetic --steps 100 --global-batch-size 32 --micro-batch-size 16
         --warmup-steps 5 --lr 2e-3 --seed 7 --log-interval 25 --threads "$jobs" --drop-path 0.1)
  ok=1
  for r in "$gdev:bf16:gpu_bf16" "$gdev:bf16:gpu_bf16_again" "$gdev:fp32:gpu_fp32" \
           "cpu:bf16:cpu_bf16" "cpu:fp32:cpu_fp32"; do
    IFS=: read -r dev prec dir <<<"$r"
    t0=$SECONDS
    run "$(cap 100 200)" "$tlog" "$vit3d" "${targs[@]}" --device "$dev" --precision "$prec" \
      --log-dir "$work/$dir" || ok=0
    echo "($dir on $dev: $((SECONDS - t0)) s)" >>"$tlog"
    ((ok)) || break  # the first failure says enough; keep the time for the other parts
  done
  for f in gpu_bf16 cpu_fp32; do  # (in train.log: the device tool brings back 8 files at most)
    echo "==== $f/metrics.jsonl ====" >>"$tlog"
    cat "$work/$f/metrics.jsonl" >>"$tlog" 2>/dev/null
  done
  if ((ok)); then
    # Relative loss tolerances per band of steps (tests/compare_curves.py). Step 1 is one forward
    # from the same weights and data. fp32: only summation orders differ (about 1e-6); steps
    # 2-20: the differences feed back through AdamW, which normalises tiny gradient differences
    # (the zero-gradient k bias, see tests/compare_runs.py), 1e-3; later the curves may drift
    # apart chaotically but must stay on the same path, 2e-2. bf16 against the CPU's bf16 twin:
    # the same, but a computed value next to a bf16 rounding boundary may round the other way
    # (tests/test_cuda_ops.c), so 1e-4 at step 1 and 2e-3 to step 20. bf16 against fp32 (the
    # issue's "within bf16 tolerance"): the bands of tests/test_train.sh, where the CPU's bf16
    # stays within 7.0e-4 of fp32 over 50 steps.
    cc=$root/tests/compare_curves.py
    verdicts=""
    for cmp in "gpu_fp32|cpu_fp32|$gdev fp32 vs cpu fp32|1-1:1e-5,2-20:1e-3,21-100:2e-2|" \
               "gpu_bf16|cpu_bf16|$gdev bf16 vs cpu bf16|1-1:1e-4,2-20:2e-3,21-100:2e-2|gpu_bf16_again" \
               "gpu_bf16|cpu_fp32|$gdev bf16 vs cpu fp32|1-1:1e-3,2-20:1e-2,21-100:3e-2|"; do
      IFS='|' read -r x y label bands same <<<"$cmp"
      extra=()
      [[ -n $same ]] && extra=(--same "$work/$same/metrics.jsonl")
      "$py" "$cc" "$work/$x/metrics.jsonl" "$work/$y/metrics.jsonl" --label "$label" \
        --bands "$bands" --tail-tol 1e-2 "${extra[@]}" >>"$tlog" 2>&1
      verdicts+="$label: $(grep "^$label: VERDICT" "$tlog" | tail -1 | sed 's/.*VERDICT //'); "
    done
    note "training 100 steps: $verdicts$(grep -E 'determinism' "$tlog" | tail -1 | sed 's/.*determinism: //')"
    grep -E "(determinism|loss steps|mean loss)" "$tlog"
  else
    note "training: a run FAILED (see train.log)"
    tail -20 "$tlog"
  fi
  # The model variants (LayerScale, registers, patch-only positions, QK-norm without qkv bias,
  # dropout and a pre-logits layer; then with parallel blocks, LAMB and the BCE loss on binary
  # targets) for 20 steps in bf16, CUDA against the CPU twin: their ops (layer_scale, qk_norm,
  # embed with prefix tokens, dropout, act's tanh, lamb_moments/apply, bce_fwd) inside a
  # training step on the GPU.
  vargs=(--steps 20 --precision bf16 --layer-scale 0.2 --reg-tokens 2 --no-embed-class 1
         --qk-norm 1 --qkv-bias 0)
  vverdicts=""
  # Bands 2-20: the sequential variant, with dropout at four sites, is the most sensitive: its
  # bf16 run on the CPU strays 6.6e-3 from its fp32 run by step 12 (grad norm 48%), and the first
  # H200 run had CUDA bf16 2.3e-3 from the CPU twin at step 14; so 5e-3 there, 2e-3 for the other.
  for v in "seq|5e-3|--proj-drop 0.1 --attn-drop 0.1 --pos-drop 0.1 --drop 0.1 --pre-logits 48" \
           "par|2e-3|--parallel-blocks 1 --opt lamb --bce-loss 1 --bce-target-thresh 0.05"; do
    IFS='|' read -r vn vtol vflags <<<"$v"
    vok=1
    for side in "gpu|$gdev" "cpu|cpu"; do
      IFS='|' read -r sname dev <<<"$side"
      run "$(cap 40 100)" "$tlog" "$vit3d" "${targs[@]}" "${vargs[@]}" $vflags --device "$dev" \
        --log-dir "$work/var_${vn}_$sname" || vok=0
    done
    label="$gdev bf16 vs cpu bf16, variants $vn"
    if ((vok)); then
      "$py" "$root/tests/compare_curves.py" "$work/var_${vn}_gpu/metrics.jsonl" \
        "$work/var_${vn}_cpu/metrics.jsonl" --label "$label" --bands "1-1:1e-4,2-20:$vtol" \
        --tail-tol 1e-2 >>"$tlog" 2>&1
      vverdicts+="$vn: $(grep "^$label: VERDICT" "$tlog" | tail -1 | sed 's/.*VERDICT //'); "
    else
      vverdicts+="$vn: a run FAILED (see train.log); "
    fi
  done
  note "training 20 steps with the model variants: $vverdicts"
fi

# ---- 4. speed: ViT-B/16 on CUDA against timm + PyTorch ----------------------------------------------
blog2=$out/bench.log
plog=$out/torch.log
: >"$blog2"
: >"$plog"
ours="" eager="" compiled=""
tb=$root/tests/gpu/bench_torch_gpu.py
if ((cpu_only)); then
  bargs=(--cpu --model tiny --batch 8 --warmup 1 --timed 3)
  mb=8 model=tiny
else
  bargs=(--model vit-b16 --batch "$bb" --warmup 3 --timed 10)
  mb=$bb model=vit-b16
fi
if ((built)) && part bench; then
  # VT_CUBLASLT_REPORT: each cuBLASLt plan says whether an algorithm took its bias epilogue (a
  # bf16 D with a bf16 bias: qkv and fc1; an fp32 D with fp32 bias and C: proj and fc2).
  run "$(cap 150 150)" "$blog2" env VT_CUBLASLT_REPORT=1 "$bench" "${bargs[@]}" --precision bf16
  ours=$(grep -oE '^vit3d-bench step_ms.*' "$blog2" | grep -oE 'img_per_s=[0-9.]+' | cut -d= -f2)
  plans=$(grep -oE 'cuBLASLt bias epilogue .*' "$blog2" | sort -u | sed 's/cuBLASLt bias epilogue //' |
          paste -sd';' -)
  note "cuBLASLt plans (bf16 bench): ${plans:-none reported}"
  # fp32 for comparison (what the bf16 GEMMs gained), when the budget allows it.
  if (($(left) > 300)); then
    run "$(cap 100 200)" "$blog2" "$bench" "${bargs[@]}" --precision fp32
    ours32=$(grep -oE '^vit3d-bench step_ms.*' "$blog2" | sed -n 2p | grep -oE 'img_per_s=[0-9.]+' | cut -d= -f2)
    note "bench_gpu fp32: ${ours32:-n/a} images/s (bf16: ${ours:-n/a})"
  fi
  grep -E '^vit3d-bench' "$blog2"
  # The trainer end to end: its step includes making the synthetic images on the host (the
  # rank's threads share them), so this is below bench_gpu by that much; the metrics line is
  # what users see.
  run "$(cap 150 150)" "$blog2" "$vit3d" train --device "$gdev" --model "$model" --data synthetic \
    --steps 8 --warmup-steps 0 --global-batch-size "$mb" --micro-batch-size "$mb" \
    --peak-tflops 989 --log-dir "$work/bench" --log-interval 1 --threads "$jobs" --precision bf16 \
    --trace-steps 2
  # Its timeline of steps 2-3 (launch/timeline.c): on a GPU each pass on the device's track too.
  cp "$work/bench/trace.json" "$out/trace_bench.json" 2>/dev/null
  tl=$("$py" "$root/tests/timeline_check.py" "$work/bench/trace.json" "$work/bench/metrics.jsonl" \
       1 1 1 0 "$([[ $gdev == cuda ]] && echo 1 || echo 0)" 2>&1 | tail -1)
  note "timeline of the trainer's steps 2-3 (trace_bench.json): ${tl:-none}"
  trainer=$("$py" - "$work/bench/metrics.jsonl" 2>/dev/null <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]  # steps 3.. (first steps warm up)
print(f"img_per_s={statistics.median(r['img_per_s'] for r in rows):.1f} "
      f"mfu={statistics.median(r.get('mfu', 0) for r in rows):.4f} "
      f"model_tflops={statistics.median(r['model_tflops'] for r in rows):.2f}")
PY
)
  echo "trainer metrics (median of steps 3-8): ${trainer:-none}" >>"$blog2"
  # The issue's check 3: the start-up memory plan against what the GPU reports after step 1.
  mem=$(grep -m1 -oE 'memory after the first step.*' "$blog2")
  note "memory plan vs GPU ($model batch $mb, bf16): ${mem:-no report (only on a GPU; see bench.log)}"
  [[ -z $ours ]] && note "bench_gpu: no result ($(grep -m1 -oE 'SKIP:.*' "$blog2" || echo 'see bench.log'))"
  note "vit3d bf16 $model batch $mb: bench_gpu $(grep -m1 -oE '^vit3d-bench step_ms.*' "$blog2" | grep -oE '(img_per_s|mfu|step_ms median)=[0-9.]+' | tr '\n' ' ')| trainer ${trainer:-none} (synthetic images made on the host's threads inside its step)"
fi
# ViT-L/16 (the issue's second model), bf16, against timm's vit_large_patch16_224 in eager mode
# (torch.compile of ViT-L takes minutes: not here); run right after ViT-B's eager peer, before
# torch.compile and the diagnostics, so that a default call brings its figures.
ratio() { [[ -n $1 && -n $2 ]] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }' || echo "n/a"; }
lb=${VT_BENCH_BATCH_L:-64}
vitl_part() {
  if ((built && !cpu_only)) && part vitl && (($(left) > 120)); then
    local from oursl mful eagerl="" lline
    from=$(($(wc -l <"$blog2") + 1))
    run "$(cap 90 60)" "$blog2" "$bench" --model vit-l16 --batch "$lb" --warmup 2 --timed 6 \
      --precision bf16
    lline=$(tail -n +"$from" "$blog2" | grep -m1 -oE '^vit3d-bench step_ms.*')
    oursl=$(grep -oE 'img_per_s=[0-9.]+' <<<"$lline" | cut -d= -f2)
    mful=$(grep -oE 'mfu=[0-9.]+' <<<"$lline" | cut -d= -f2)
    if "$py" -c 'import torch, timm' >/dev/null 2>&1 && (($(left) > 60)); then
      run "$(cap 90 10)" "$plog" "$py" "$tb" --mode eager --model vit_large_patch16_224 \
        --batch "$lb" --warmup 2 --timed 6
      eagerl=$(grep -oE '^torch-bench mode=eager.*' "$plog" | tail -1 | grep -oE 'img_per_s=[0-9.]+' | cut -d= -f2)
    fi
    note "ViT-L/16 batch $lb images/s: vit3d bf16 ${oursl:-n/a} (mfu ${mful:-n/a}) | torch bf16 eager ${eagerl:-n/a} (vit3d/torch $(ratio "$oursl" "$eagerl"))"
  elif ((built && !cpu_only)) && part vitl; then
    note "ViT-L/16 skipped: $(left) s left of the budget"
  fi
}
if ! part bench; then
  vitl_part
elif "$py" -c 'import torch, timm' >/dev/null 2>&1; then
  if ((cpu_only)); then
    pargs=(--device cpu --model vit_tiny_patch16_224 --batch 2 --warmup 1 --timed 2)
  else
    pargs=(--batch "$bb" --warmup 3 --timed 10)
  fi
  run "$(cap 120 100)" "$plog" "$py" "$tb" --mode eager "${pargs[@]}"
  eager=$(grep -oE '^torch-bench mode=eager.*' "$plog" | grep -oE 'img_per_s=[0-9.]+' | cut -d= -f2)
  vitl_part
  # torch.compile of ViT-B forward + backward takes a minute or two on 16 cores.
  if [[ ${VT_GPU_COMPILE:-1} == 0 ]]; then
    note "torch.compile skipped: VT_GPU_COMPILE=0"
  elif (($(left) > 150)); then
    run "$(cap 300 10)" "$plog" "$py" "$tb" --mode compile "${pargs[@]}"
    compiled=$(grep -oE '^torch-bench mode=compile.*' "$plog" | grep -oE 'img_per_s=[0-9.]+' | cut -d= -f2)
    [[ -z $compiled ]] && note "torch.compile: no result ($(grep -m1 -oE 'torch-bench SKIP.*' "$plog" || echo 'timed out or failed, see torch.log'))"
  else
    note "torch.compile skipped: only $(left) s left of the budget"
  fi
  grep -E '^torch-bench' "$plog"
else
  note "PyTorch peer skipped: $py cannot import torch and timm"
  vitl_part
fi
part bench && note "images/s: vit3d bf16 ${ours:-n/a} | torch bf16 eager ${eager:-n/a} (vit3d/torch $(ratio "$ours" "$eager")) | torch bf16 compile ${compiled:-n/a} (vit3d/torch $(ratio "$ours" "$compiled"))"
# Time per op (bench_gpu --ops: a synchronize around each op, so the sum exceeds a plain step),
# the list of what to speed up next. After every figure above is parsed from bench.log.
if ((built)) && part ops && (($(left) > 90)); then
  echo "==== per-op times ====" >>"$blog2"
  from=$(($(wc -l <"$blog2") + 1))
  run "$(cap 60 60)" "$blog2" env VT_ATTN_REPORT=1 "$bench" "${bargs[@]}" --precision bf16 --ops
  base_ops=$(grep -E '^vit3d-bench op ' "$blog2")
  top=$([[ -n $base_ops ]] && sort -k5 -g -r <<<"$base_ops" | head -6 |
        awk '{t = ""; if ($NF ~ /^(tflops|gbps)=/) t = ", " $NF
              printf "%s%s %s ms (%s%s)", (NR > 1 ? ", " : ""), $3, $5, $7, t}')
  note "per-op ms per step, bf16 $model batch $mb, largest first (synchronized): ${top:-none (see bench.log)}"
  # The mma.sync attention's variants, 64 or 128 rows per block and (backward) dS stored or made
  # again, as each shape's first call timed them (attention.cu's variant_for; the fastest of
  # those with the first's bits is kept; "other bits" and a warning mark a variant that differs).
  picks=$(tail -n +"$from" "$blog2" | grep -oE '(vit3d|warning): attention_(fwd|bwd) B=.*' |
          sort -u |
          sed -E 's/^(vit3d|warning): //; s/ H=[0-9]+//; s/ rows/r/g; s/ \+ dS made again/ again/g;
                  s/ \+ dS stored/ stored/g' | paste -sd';' -)
  ((cpu_only)) || note "attention variants, timed at each shape's first call: ${picks:-none reported}"
fi

# The Linears' GEMMs alone (tests/gpu/bench_gemm.cu): cublasGemmEx, cuBLASLt's first algorithm
# and the fastest of its first 8, per GEMM of ViT-B/16 at the batch, and a square 8192 GEMM.
if ((built && !cpu_only)) && part gemm && (($(left) > 80)); then
  echo "==== bench_gemm ====" >>"$blog2"
  from=$(($(wc -l <"$blog2") + 1))
  run "$(cap 60 60)" "$blog2" "$build/tests/bench_gemm" --model vit-b16 --batch "$bb" --algos 8
  gemms=$(tail -n +"$from" "$blog2" | grep -E '^vit3d-gemm gemm=' |
          sed -E 's/.*gemm=([^ ]+) .*gemmex_tflops=([0-9.]+) lt_first_tflops=([0-9.]+) lt_best_tflops=([0-9.]+) best=([0-9]+\/[0-9]+) .*max_rel_diff=([0-9.e+-]+).*/\1 \2|\3|\4 (\5, diff \6)/' |
          paste -sd';' -)
  note "GEMM TFLOP/s, ViT-B/16 batch $bb (cublasGemmEx|cuBLASLt first|best of 8): ${gemms:-none (see bench.log)}"
fi

# ops_ab "VAR=VALUE ..." REGEX LABEL: the per-op times again with VAR=VALUE (one or more), and a
# summary line of the ops matching REGEX (ms per step) as they were and as they are with it.
ops_ab() {
  echo "==== per-op times, $1 ====" >>"$blog2"
  local from=$(($(wc -l <"$blog2") + 1)) was now
  run "$(cap 60 60)" "$blog2" env $1 "$bench" "${bargs[@]}" --precision bf16 --ops
  local fmt='{t = ""; if ($NF ~ /^(tflops|gbps)=/) t = " (" $NF ")"; printf "%s %s%s ", $3, $5, t}'
  was=$(grep -E "^vit3d-bench op ($2) " <<<"$base_ops" | awk "$fmt")
  now=$(tail -n +"$from" "$blog2" | grep -E "^vit3d-bench op ($2) " | awk "$fmt")
  note "$3 ms per step, bf16 $model batch $mb: ${was:-n/a}| with $1: ${now:-n/a}"
}
if ((built && !cpu_only)) && [[ -n ${base_ops:-} ]]; then
  # The attention's mma.sync kernels against the WMMA ones, same batch.
  [[ ${VT_ATTN_MMA:-1} != 0 ]] && (($(left) > 100)) &&
    ops_ab VT_ATTN_MMA=0 'attention_fwd|attention_bwd' "attention (mma.sync)"
  # The LayerNorm backward with its parameter partials in the input gradient's pass (dout and the
  # input read once) against two passes (VT_LN_FUSED=0; the same bits).
  [[ ${VT_LN_FUSED:-1} != 0 ]] && (($(left) > 100)) && ops_ab VT_LN_FUSED=0 'layernorm_bwd|layernorm_bwd_add' \
    "LayerNorm backward (fused partials)"
  # The linear forward ran at half the backward's rate on the H200 (about 265 against 595
  # TFLOP/s, 2026-12-04): the cuBLAS path (VT_CUBLASLT=0: the bias broadcast, then
  # cublasGemmEx) says whether cuBLASLt's bias epilogue or algorithm choice is the cause.
  (($(left) > 100)) && ops_ab VT_CUBLASLT=0 'linear_fwd|linear_act_fwd|linear_res_fwd' \
    "forward Linears (cuBLASLt)"
  # cuBLASLt's heuristic against the fastest of its first 8 algorithms, timed per plan (gemm.cu's
  # VT_CUBLASLT_TUNE), with each plan's pick and its time against the first's.
  if (($(left) > 100)); then
    from=$(($(wc -l <"$blog2") + 1))
    ops_ab "VT_CUBLASLT_TUNE=8 VT_CUBLASLT_REPORT=1" 'linear_fwd|linear_act_fwd|linear_res_fwd' \
      "forward Linears (cuBLASLt heuristic's first algorithm)"
    tuned=$(tail -n +"$from" "$blog2" | grep -oE 'cuBLASLt tuned .*' | sort -u |
            sed -E 's/cuBLASLt tuned M=[0-9]+ I=([0-9]+) O=([0-9]+) D ([a-z0-9]+)( C=res)?: algorithm ([0-9]+ of [0-9]+), ([0-9.]+) us \(the heuristic.s first: ([0-9.]+) us\)/I=\1 O=\2 \3\4 \5 \6 us (first \7)/' |
            paste -sd';' -)
    note "cuBLASLt tuning, picks: ${tuned:-none reported}"
  fi
fi

# Hardware counters of the kernels that matter (Nsight Compute, where it reads them: Firecracker
# machines, not gVisor): one ViT-B/16 step per kernel, its first launch (the first forward GEMMs),
# sections speed of light, occupancy, launch and warp states, plus the tensor pipes' activity
# (the HMMA pipe: mma.sync and WMMA; cuBLAS's Hopper GEMMs use wgmma, which it does not count)
# and the XU pipe's (the SFU: at D = 64 a score's exponential takes about as long as its q k^T
# and p v together at the tensor cores' peak, so the attention forward's two passes, two
# exponentials per score, may be bound by them rather than by the products; ARCHITECTURE.md).
# The full reports are appended to bench.log (8 files at most); a line per kernel to
# the summary (tests/gpu/ncu_summary.awk).
ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if ((built && !cpu_only)) && part ncu && [[ -n $ncu_bin ]] && (($(left) > 80)); then
  echo "==== ncu ====" >>"$blog2"
  from=$(($(wc -l <"$blog2") + 1))
  ncu_rows=""
  # colsum_final's third launch: the last block's fc2 bias (the head's and the final norm's come
  # first).
  for k in "mma_fwd_kernel|1" "mma_dq_kernel|1" "mma_dkv_kernel|1" "layernorm_bwd_fused|1" \
           "layernorm_fwd_kernel|1" "act_fwd_kernel|1" "colsum_partial|1" "colsum_final|3" \
           "nvjet|xmma|cutlass|gemm|5"; do
    kre=${k%|*} kc=${k##*|}
    (($(left) > 45)) || break
    run "$(cap 40 30)" "$blog2" "$ncu_bin" --clock-control none -k "regex:$kre" -c "$kc" \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active \
      "$bench" --model vit-b16 --batch "$bb" --warmup 0 --timed 1 --precision bf16
    # (a machine whose profiler cannot read the counters refuses every kernel alike)
    tail -n +"$from" "$blog2" | grep -qE '==ERROR==|LibraryNotLoaded|ERR_NVGPUCTRPERM' && break
  done
  ncu_rows=$(tail -n +"$from" "$blog2" | awk -f "$root/tests/gpu/ncu_summary.awk" | paste -sd';' -)
  err=$(tail -n +"$from" "$blog2" | grep -m1 -oE '==ERROR==.*|LibraryNotLoaded|ERR_NVGPUCTRPERM')
  note "ncu (ViT-B/16 batch $bb bf16, first launches): ${ncu_rows:-no kernel profiled${err:+ ($err)}}"
elif ((built && !cpu_only)) && part ncu; then
  note "ncu skipped: $([[ -z $ncu_bin ]] && echo 'no ncu' || echo "$(left) s left")"
fi

# ViT-H/14 (D = 80: the mma.sync attention's widest heads) at batch 32: the attention's time per
# step on mma.sync and on WMMA (VT_ATTN_MMA=0), with the time that is left.
if ((built && !cpu_only)) && part vith && [[ ${VT_ATTN_MMA:-1} != 0 ]] && (($(left) > 150)); then
  echo "==== ViT-H/14 attention: mma.sync, then WMMA ====" >>"$blog2"
  hb=(--model vit-h14 --batch 32 --warmup 2 --timed 4 --precision bf16 --ops)
  from=$(($(wc -l <"$blog2") + 1))
  run "$(cap 60 80)" "$blog2" "$bench" "${hb[@]}"
  mid=$(($(wc -l <"$blog2") + 1))
  run "$(cap 60 60)" "$blog2" env VT_ATTN_MMA=0 "$bench" "${hb[@]}"
  fmt='{printf "%s %s ", $3, $5}'
  h_mma=$(sed -n "${from},$((mid - 1))p" "$blog2" | grep -E '^vit3d-bench op (attention_fwd|attention_bwd) ' | awk "$fmt")
  h_wmma=$(tail -n +"$mid" "$blog2" | grep -E '^vit3d-bench op (attention_fwd|attention_bwd) ' | awk "$fmt")
  note "ViT-H/14 batch 32 attention ms per step: mma.sync ${h_mma:-n/a}| WMMA ${h_wmma:-n/a}"
fi

# ---- 5. memory and race checks, with the time that is left ---------------------------------------
# No GPU ran these kernels before; compute-sanitizer (works on Firecracker H200 machines) finds
# out-of-bounds accesses (memcheck, every op) and shared-memory races (racecheck, the ops with
# block reductions and the flash attention kernels' tiles). Appended to ctest.log to stay within
# 8 files.
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
# san_verdict RC FROM: the verdict of the sanitizer run whose report starts at line FROM of
# ctest.log; with errors, the kernels they were found in. Hazards reported only inside cuBLAS's
# own kernels (nvjet*, sm90_xmma*, cutlass*: its Hopper GEMMs, whose asynchronous copies and
# barriers racecheck does not follow; the first H200 run saw 480 there) are told apart from ours.
san_verdict() {
  local ks ours
  ks=$(tail -n +"$2" "$clog" | grep -oE '(^=+ +at|access at) (void )?[A-Za-z_][A-Za-z0-9_]*' |
       awk '{print $NF}' | sort -u | xargs)
  ours=$(tr ' ' '\n' <<<"$ks" | grep -vE '^(nvjet|sm[0-9]+_xmma|cutlass|cublas)' | xargs)
  case $1 in
    0) echo "clean" ;;
    9) if [[ -z $ours ]]; then echo "hazards only in cuBLAS's own kernels ($ks), none in ours"
       else echo "FOUND ERRORS in $ours (see ctest.log)"; fi ;;
    124 | 137) echo "timed out" ;;
    *) if tail -n +"$2" "$clog" | grep -qiE 'not supported|error 999'; then
         echo "not run: the sanitizer does not support this device (see ctest.log)"; return
       fi ;;&
    *) echo "exit $1 (1: an op check failed; see ctest.log)" ;;
  esac
}
((cpu_only)) || [[ -n $san ]] || note "sanitizers skipped: no compute-sanitizer"
if ((built)) && ((!cpu_only)) && part san && [[ -n $san ]]; then
  if (($(left) > 60)); then
    echo "==== compute-sanitizer memcheck ====" >>"$clog"
    from=$(($(wc -l <"$clog") + 1))
    run "$(cap 120 25)" "$clog" "$san" --tool memcheck --error-exitcode 9 "$build/tests/test_cuda_ops"
    note "memcheck of every op: $(san_verdict $? "$from")"
  fi
  # Two racecheck runs: the reductions first (quick), then the attention kernels (many shared-
  # memory accesses per thread: slow under racecheck; all 11 shapes in both precisions did not
  # finish in 113 s, so their first 3: N 197, 5 and 300, D 64, 7 and 8) with the time left.
  if (($(left) > 40)); then
    echo "==== compute-sanitizer racecheck ====" >>"$clog"
    from=$(($(wc -l <"$clog") + 1))
    run "$(cap 60 30)" "$clog" "$san" --tool racecheck --error-exitcode 9 "$build/tests/test_cuda_ops" \
      layernorm_bwd norm_mean_pool_bwd latent_attention_bwd cross_entropy_fwd sumsq linear_bwd \
      act_bwd
    note "racecheck (layernorm_bwd, norm_mean_pool_bwd, latent_attention_bwd, cross_entropy_fwd, sumsq, linear_bwd, act_bwd): $(san_verdict $? "$from")"
  fi
  if (($(left) > 30)); then
    echo "==== compute-sanitizer racecheck, attention ====" >>"$clog"
    from=$(($(wc -l <"$clog") + 1))
    run "$(cap 120 5)" "$clog" "$san" --tool racecheck --error-exitcode 9 "$build/tests/test_cuda_ops" \
      --shapes=3 attention_fwd attention_bwd
    note "racecheck (attention_fwd, attention_bwd, their first 3 shapes): $(san_verdict $? "$from")"
  else
    note "racecheck skipped: $(left) s left"
  fi
fi

# ---- 6. summary -----------------------------------------------------------------------------------
{
  echo
  echo "==== tests/gpu/run.sh summary ($((SECONDS - t_start)) s of ${budget} s) ===="
  printf '%s\n' "${summary[@]}"
} | tee "$out/summary.txt"
rm -rf "$work"
