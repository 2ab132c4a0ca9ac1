#!/usr/bin/env bash
# test_cuda_mesh_emu.sh VIT3D_EMU VIT3D: `vit3d train --device cuda` on several ranks, built on the
# CUDA emulation with NCCL emulated over TCP (tests/cuda_emu/nccl_emu*.cpp), follows the CPU run of
# the same mesh over MPI: the NCCL transport (parallel/comm_nccl.cu) on every axis, which a lent GPU
# (one per task) can only run with one rank per communicator. The meshes: TP with sequence
# parallelism (all-gathers and reduce-scatters; the gap and MAP heads without a class token, whose
# backwards gather the tokens again; dropout, each TP rank drawing its rows' and its hidden units'
# masks on its device), PP 1F1B (sends on the send stream over the links to the neighbours, receives
# on the compute stream), DP with the layer all-reduces overlapped on the side stream, DP with
# ZeRO-1, the interleaved schedule over TP x PP, ZB-H1 on 4 stages (its sends complete in the
# background) and on 2 stages x dp 2 (the send stream beside the overlapped DP reductions' side
# stream), ZB-V on 4 stages and on 2 stages x dp 2 with an image folder and the evaluation
# (activations and gradients on their own links and send streams, the turn a device copy), the
# interleaved ring on 3 stages (an odd ring: its last link made in a round of its own), LAMB with
# clipping, layer decay and dropout on parallel blocks over TP x DP, an image folder over TP x PP
# with the decoding split over TP (the shares all-gathered on the devices) and the evaluation after
# the last step through the pipeline, and tp 2 x pp 2 x dp 2 with ZeRO-1, sequence parallelism and
# the EMA, whose checkpoints (every rank writes its part from its device) must hold the CPU run's
# weights; fp32 and bf16. Frozen tensors in three of them: a frozen prefix under LAMB (its backward
# skipped), the same on ZB-V's 4 stages (its first 3 of 8 virtual stages wholly frozen: no gradient
# sent to them), and a frozen prefix (no optimizer state, ZeRO-1 sharding the rest; the checkpoint
# writes its zero moments and EMA) and frozen norms inside ZeRO-1's shards with the EMA. The
# pipeline runs time their passes with the devices' timing events: each reports its stages' idle,
# and ZB-V's build their order for the times (--pp-pass-times auto). One GPU per rank, chosen by
# local rank; two ranks on one GPU are refused (by the GPUs' UUIDs), ranks each shown a GPU of
# their own are not. Tolerances as test_cuda_train_emu.sh's. The
# emulation aborts where a send's buffer is written before its stream's work is waited for. Not seen
# here: real NCCL's concurrency (the emulation posts each message at its call and completes it when
# its stream's work is needed); tests/gpu/run.sh on a GPU sees one rank of it. The 2x2x2 mesh
# runs again in the TCP world (launch/spawn.sh, no MPI): its checkpoint the mpirun run's bytes.
# Every run's NVTX ranges (counted by the emulation) are closed on every rank, with send-recv
# actions on the pipelines and weight passes under the zero-bubble schedules.
set -uo pipefail
emu=$1 vit3d=$2
bash "$(dirname "$0")/needs_images.sh" "$vit3d" || exit $?
here=$(cd "$(dirname "$0")" && pwd)
py=${VT_REF_PYTHON:-/usr/bin/python3}  # numpy, for compare_runs.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
args=(train --model tiny --img-size 32 --patch-size 8 --data synthetic --steps 3
      --global-batch-size 8 --micro-batch-size 2 --warmup-steps 1 --lr 2e-3 --seed 7
      --threads 1 --log-interval 1)
fail=0
# An image folder (PNG and JPEG) for the run that loads and evaluates real images.
"$py" "$here/make_images.py" "$work/imgs" 4 16 32 ||
  { echo "FAIL: tests/make_images.py"; exit 1; }
meshes=$(cat <<'MESHES'
2 fp32 --tp 2 --sequence-parallel 1 --global-pool gap --class-token 0 --reg-tokens 1 --proj-drop 0.1 --pos-drop 0.1 --drop 0.1
2 bf16 --tp 2 --sequence-parallel 1 --global-pool map --class-token 0 --pre-norm 1 --norm-eps 1e-5 --act quick_gelu
2 bf16 --pp 2
2 fp32 --dp 2
2 bf16 --dp 2 --zero 1
4 bf16 --tp 2 --pp 2 --pp-chunks 2 --pp-schedule interleaved
4 fp32 --pp 4 --pp-schedule zb-h1
4 bf16 --pp 2 --dp 2 --pp-schedule zb-h1 --global-batch-size 16
4 bf16 --pp 4 --pp-schedule zb-v --depth 8 --freeze ^(patch_embed|cls_token|pos_embed|blocks\.[0-2]\.)
4 fp32 --pp 2 --dp 2 --pp-schedule zb-v --global-batch-size 16 --data IMGS --val-data IMGS --num-classes 4 --loader-threads 1
3 bf16 --pp 3 --pp-chunks 2 --pp-schedule interleaved --global-batch-size 12 --depth 6
4 fp32 --tp 2 --dp 2 --opt lamb --clip-grad 0.5 --parallel-blocks 1 --layer-decay 0.75 --proj-drop 0.1 --attn-drop 0.1 --freeze ^(patch_embed|cls_token|pos_embed|blocks\.0\.)
4 fp32 --tp 2 --pp 2 --data IMGS --val-data IMGS --num-classes 4 --loader-threads 1 --decode-split 1
8 fp32 --tp 2 --pp 2 --dp 2 --zero 1 --sequence-parallel 1 --model-ema 0.9 --save-interval 2 --freeze ^(patch_embed|cls_token|pos_embed|blocks\.0\.|blocks\.[02]\.norm)
MESHES
)
while read -r np precision flags; do
  [ -n "$np" ] || continue
  flags=${flags//IMGS/$work/imgs}
  name=$(tr -c 'a-z0-9\n' '_' <<<"np${np}_${precision}_${flags}")
  cpu_save=() emu_save=()  # a run that saves checkpoints: into its log folder
  if [[ $flags == *--save-interval* ]]; then
    cpu_save=(--save "$work/cpu_$name/ck") emu_save=(--save "$work/emu_$name/ck")
  fi
  timeout 300 mpirun -np "$np" --oversubscribe "$vit3d" "${args[@]}" --precision "$precision" \
    $flags "${cpu_save[@]}" --log-dir "$work/cpu_$name" < /dev/null > "$work/cpu_$name.log" 2>&1 ||
    { echo "FAIL: the CPU run ($np ranks, $precision, $flags)"; tail -5 "$work/cpu_$name.log"; fail=1; continue; }
  if ! EMU_GPUS=$np EMU_NVTX_REPORT="$work/nvtx_$name" timeout 600 mpirun -np "$np" \
       --oversubscribe -x EMU_GPUS -x EMU_NVTX_REPORT "$emu" "${args[@]}" \
       --device cuda --precision "$precision" $flags "${emu_save[@]}" \
       --log-dir "$work/emu_$name" \
       < /dev/null > "$work/emu_$name.log" 2>&1; then
    echo "FAIL: the emulated CUDA run ($np ranks, $precision, $flags)"
    # the emulation's or the trainer's message, else the log's end
    grep -m5 -E "^emulated|error|vit3d:|\.(c|cu|cpp):[0-9]+:" "$work/emu_$name.log" ||
      tail -5 "$work/emu_$name.log"
    fail=1
    continue
  fi
  # Each rank on its own (emulated) GPU, the one of its local rank; the transport NCCL.
  for r in $(seq 0 $((np - 1))); do
    grep -q "rank $r .*device cuda:$r " "$work/emu_$name.log" ||
      { echo "FAIL: rank $r is not on cuda:$r ($flags)"; fail=1; }
  done
  # The passes timed on the (emulated) devices by events: every pipeline run reports its
  # stages' idle, and ZB-V under --pp-pass-times auto builds its order for the times.
  if [[ $flags == *--pp* ]] && ! grep -q "pipeline idle fraction per stage:" "$work/emu_$name.log"; then
    echo "FAIL: no pipeline idle report from the emulated GPUs ($flags)"; fail=1
  fi
  if [[ $flags == *zb-v* ]] && ! grep -q "zb-v: this run's passes per unit took forward" "$work/emu_$name.log"; then
    echo "FAIL: zb-v did not time its passes on the emulated GPUs ($flags)"; fail=1
  fi
  # The NVTX ranges (a profiler's timeline) on every rank: all closed; with pipeline stages a
  # range per send-recv action, with zero-bubble schedules per weight pass.
  for r in $(seq 0 $((np - 1))); do
    f=$work/nvtx_$name.$r
    grep -q $'^open at exit\t0$' "$f" 2>/dev/null && grep -q $'^step #\t3$' "$f" &&
      { [[ $flags != *--pp* ]] || grep -q $'^send-recv\t' "$f"; } &&
      { [[ $flags != *zb-* ]] || grep -q $'^weight mb # chunk #\t' "$f"; } ||
      { echo "FAIL: rank $r's NVTX ranges ($flags):"; cat "$f" 2>/dev/null; fail=1; }
  done
  bands="1-1:1e-5,2-3:2e-5"
  [[ $precision == bf16 ]] && bands="1-1:1e-4,2-3:2e-3"
  python3 "$here/compare_curves.py" "$work/emu_$name/metrics.jsonl" \
    "$work/cpu_$name/metrics.jsonl" --label "emulated cuda vs cpu, $np ranks $precision $flags" \
    --bands "$bands" --tail-tol 1e-2 || fail=1
  # The evaluation after the last step (the pipeline's forward ring over NCCL): the CPU's
  # figures, loss within the step tolerance.
  if [[ $flags == *--val-data* ]] && ! "$py" - "$work/emu_$name/metrics.jsonl" \
       "$work/cpu_$name/metrics.jsonl" <<'PY'
import json, sys
a, b = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:])
ok = abs(a["eval_loss"] - b["eval_loss"]) <= 1e-4 * abs(b["eval_loss"]) and \
    a["eval_top1"] == b["eval_top1"] and a["eval_top5"] == b["eval_top5"]
print(f"evaluation: emulated cuda loss {a['eval_loss']} top-1 {a['eval_top1']}, cpu "
      f"{b['eval_loss']} {b['eval_top1']}: {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
  then echo "FAIL: the evaluation of $flags"; fail=1; fi
  # Checkpoints copied from the devices (step 2 in the background, 3 in place): they verify,
  # and hold the CPU run's weights and EMA (compare_runs.py's fp32 tolerances).
  if [ ${#emu_save[@]} -gt 0 ]; then
    { "$vit3d" inspect "$work/emu_$name/ck" > /dev/null &&
      "$py" "$here/compare_runs.py" "$work/cpu_$name" "$work/emu_$name" "checkpoint of $flags" \
        ck/step-00000003/model.safetensors &&
      "$py" "$here/compare_runs.py" "$work/cpu_$name" "$work/emu_$name" "EMA of $flags" \
        ck/step-00000003/ema.safetensors; } || { echo "FAIL: the emulated run's checkpoint"; fail=1; }
  fi
done <<<"$meshes"
# The TCP world (launch/spawn.sh, as torchrun starts ranks: no MPI) with the same emulated NCCL:
# the 8-rank mesh above again, its checkpoint byte-identical to the mpirun run's (every axis has
# two ranks, and a sum of two terms is the same sum in either world's order).
last=$(grep -v '^$' <<<"$meshes" | tail -n 1)
read -r np precision flags <<<"$last"
name=$(tr -c 'a-z0-9\n' '_' <<<"np${np}_${precision}_${flags}")
if EMU_GPUS=$np SPAWN_GRACE=10 timeout 600 "$here/../launch/spawn.sh" "$np" "$emu" "${args[@]}" \
     --device cuda --precision "$precision" $flags --save "$work/tcp_$name/ck" \
     --log-dir "$work/tcp_$name" < /dev/null > "$work/tcp_$name.log" 2>&1 &&
   grep -q "world rank 0 of $np (tcp)" "$work/tcp_$name.log" &&
   cmp "$work/emu_$name/ck/step-00000003/model.safetensors" \
     "$work/tcp_$name/ck/step-00000003/model.safetensors"; then
  echo "ok: $np ranks on emulated GPUs over TCP (spawn.sh) == under mpirun (byte-identical)"
else
  echo "FAIL: the emulated run over TCP ($np ranks, $flags)"
  grep -v "^\[rank" "$work/tcp_$name.log" | tail -5
  fail=1
fi
# ZB-H1's sends on the send stream add no host wait: each rank of pp 2 waits for the device as
# often per run under zb-h1 as under 1f1b (the emulation's counts, EMU_SYNC_REPORT).
for s in 1f1b zb-h1; do
  EMU_GPUS=2 EMU_SYNC_REPORT="$work/sync_$s" timeout 300 mpirun -np 2 --oversubscribe \
    -x EMU_GPUS -x EMU_SYNC_REPORT "$emu" "${args[@]}" --device cuda --pp 2 --pp-schedule "$s" \
    --log-dir "$work/sync_$s.d" < /dev/null > "$work/sync_$s.log" 2>&1 ||
    { echo "FAIL: the emulated pp 2 $s run"; tail -5 "$work/sync_$s.log"; fail=1; }
done
for r in 0 1; do
  if cmp -s "$work/sync_1f1b.$r" "$work/sync_zb-h1.$r"; then
    echo "ok: pipeline rank $r waits for the device as often under zb-h1 as under 1f1b: $(tr '\n' ' ' < "$work/sync_1f1b.$r")"
  else
    echo "FAIL: pipeline rank $r's host waits: 1f1b $(tr '\n' ' ' < "$work/sync_1f1b.$r" 2>&1), zb-h1 $(tr '\n' ' ' < "$work/sync_zb-h1.$r" 2>&1)"
    fail=1
  fi
done
# One GPU for two ranks on this host: refused, naming what to do; each rank shown a GPU of its
# own (srun --gpus-per-task=1: one GPU visible to each, another one's) trains.
out=$(EMU_GPUS=1 timeout 300 mpirun -np 2 --oversubscribe -x EMU_GPUS "$emu" "${args[@]}" \
      --device cuda --dp 2 < /dev/null 2>&1)
if grep -q "world rank 0 has the GPU this rank picked (cuda:0 CPU-emulated GPU" <<<"$out"; then
  echo "ok: 2 ranks on 1 GPU refused: $(grep -o 'world rank 0 has the GPU.*' <<<"$out" | head -n 1)"
else echo "FAIL: 2 ranks on 1 GPU: $out"; fail=1; fi
if EMU_GPUS=1 timeout 300 mpirun -np 2 --oversubscribe -x EMU_GPUS bash -c \
     'EMU_GPU_BASE=$OMPI_COMM_WORLD_LOCAL_RANK exec "$0" "$@"' "$emu" "${args[@]}" \
     --device cuda --dp 2 < /dev/null > "$work/own_gpu.log" 2>&1; then
  echo "ok: 2 ranks each shown one GPU of its own train"
else echo "FAIL: 2 ranks each shown its own GPU:"; tail -5 "$work/own_gpu.log"; fail=1; fi
# VT_CUBLASLT_TUNE (timed picks, per process) with TP: refused, since the TP ranks' copies of
# the tensors they all hold would drift apart in their last bits.
EMU_GPUS=2 VT_CUBLASLT_TUNE=4 timeout 120 mpirun -np 2 --oversubscribe -x EMU_GPUS \
  -x VT_CUBLASLT_TUNE "$emu" "${args[@]}" --device cuda --tp 2 < /dev/null > "$work/tune.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "VT_CUBLASLT_TUNE=4 times cuBLASLt's algorithms on each rank" "$work/tune.log"
then echo "ok: VT_CUBLASLT_TUNE with --tp 2 refused at start-up"
else echo "FAIL: VT_CUBLASLT_TUNE with --tp 2: rc $rc"; tail -3 "$work/tune.log"; fail=1; fi
echo "test_cuda_mesh_emu: $([ $fail = 0 ] && echo passed || echo FAILED)"
exit $fail
