#!/usr/bin/env bash
# fuzz_cuda_ops.sh TEST_CUDA_OPS_EMU [SHAPES] [SEED]: the CUDA kernels at random shapes on the
# CUDA emulation, against the CPU (test_cuda_ops --shape), where the fixed table's shapes may
# miss a tail: SHAPES (default 12) draws of an op family and its dims, sizes often next to a
# kernel's tile or vector width. Where a family has variants that must give the same bits, each
# draw runs in each and the lines (with the hashes of the outputs' bits) must be the same:
#   attention (forward and backward at one shape; N up to 577, ViT-B/16 at 384 px; D mostly the
#     mma.sync kernels' multiples of 8 up to 80, sometimes the WMMA and fp32 kernels'): 64 rows
#     per block making dS again with every cp.async landing at its issue (EMU_CP_ASYNC=early),
#     and 128 rows storing dS with the copies landing at their wait (attention.cu's variant_for);
#   layernorm (the four ops at one shape; C up to 1300, past the register kernels' 1024): the
#     backward's partials in the input gradient's pass and in a second pass (VT_LN_FUSED);
#   linear (the six GEMM ops, their bias and column sums; M past the 512-row column-sum chunk),
#     act (GELU's three forms and tanh, the bias column sums) and qk_norm: one run each.
# A failure prints the command that repeats it. SEED (default: the time) picks the draws; the
# test's label runs a fixed seed; a longer hunt is e.g.
# `bash tests/fuzz_cuda_ops.sh build/tests/test_cuda_ops_emu 300`.
set -uo pipefail
ops=$1 shapes=${2:-12} seed=${3:-$(date +%s)}
RANDOM=$seed
echo "fuzz_cuda_ops: $shapes draws, seed $seed"
pick() { local a=("$@"); echo "${a[RANDOM % $#]}"; }
# size LIMIT EDGE...: an edge (half the time) or 1 .. LIMIT
size() { local n=$1; shift; if ((RANDOM % 2)); then pick "$@"; else echo $((1 + RANDOM % n)); fi; }
fail=0
# run "VARIANT;..." ARGS...: the op test in each variant (env settings, ';' between variants;
# '-' none), the same lines from all
run() {
  local first="" v out IFS=';'
  local -a vs=($1); shift
  IFS=' '
  for v in "${vs[@]}"; do
    [ "$v" = - ] && v=""
    # shellcheck disable=SC2086 # the settings split into words
    out=$(env $v "$ops" "$@" 2>&1)
    if [ $? -ne 0 ]; then
      echo "$out"; echo "FAIL: $v $ops $*"; fail=1; return
    elif [ -z "$first" ]; then
      first=$out; grep -E '^ +(fp32|bf16) ' <<<"$out"
    elif [ "$out" != "$first" ]; then
      echo "FAIL: $v $ops $* printed other lines than ${vs[0]}:"
      diff <(echo "$first") <(echo "$out") | head -10; fail=1; return
    fi
  done
}
attn="EMU_CP_ASYNC=early VT_ATTN_ROWS=64 VT_ATTN_DS=0;VT_ATTN_ROWS=128 VT_ATTN_DS=1"
for ((s = 0; s < shapes; s++)); do
  case $((RANDOM % 6)) in
    0 | 1)
      n=$(size 300 1 2 63 64 65 127 128 129 191 192 193 197 255 256 257 577)
      b=$((1 + RANDOM % 3)) h=$((1 + RANDOM % 3))
      d=$(pick 8 16 24 32 40 48 56 64 64 64 72 80 80 3 7 33 96)
      ((n > 300)) && b=1 h=1  # the emulation's time grows with N^2
      drop=$((RANDOM % 3)) dbias=$((RANDOM % 2))
      run "$attn" "--shape=$b,$n,$h,$d,$drop" attention_fwd
      run "$attn" "--shape=$b,$n,$h,$d,$((dbias + 2 * drop))" attention_bwd ;;
    2)
      m=$(size 1200 1 31 32 33 511 512 513)
      c=$(size 1300 1 3 4 8 127 128 129 192 768 1020 1024 1028 1280)
      run "VT_LN_FUSED=1;VT_LN_FUSED=0" "--shape=$m,$c,$((RANDOM % 4))" layernorm_fwd
      run "VT_LN_FUSED=1;VT_LN_FUSED=0" "--shape=$m,$c" layernorm_bwd add_layernorm_fwd \
        layernorm_bwd_add ;;
    3)
      m=$(size 1100 1 7 8 9 511 512 513 1025) i=$(size 400 1 8 63 64 65) o=$(size 400 1 8 63 64 65)
      run - "--shape=$m,$i,$o,$((RANDOM % 2))" linear_fwd linear_residual_fwd linear_act_fwd
      run - "--shape=$m,$i,$o,$(pick 1 2 3 5 7)" linear_bwd
      run - "--shape=$m,$i,$o,$(pick 0 2 4 6)" linear_bwd_act
      run - "--shape=$m,$i,$o,$(pick 0 1 3)" linear_act_bwd ;;
    4)
      m=$(size 1100 1 511 512 513 1025) f=$(size 800 1 7 8 9 15 16 17 768)
      kind=$((RANDOM % 4))
      run - "--shape=$((m * f)),$kind" act_fwd
      run - "--shape=$m,$f,$((RANDOM % 2)),$kind" act_bwd ;;
    5)
      m=$(size 600 1 511 512 513) h=$((1 + RANDOM % 4)) d=$(size 96 1 7 8 32 33 64 80)
      run - "--shape=$m,$h,$d" qk_norm_fwd
      run - "--shape=$m,$h,$d,$((RANDOM % 2))" qk_norm_bwd ;;
  esac
done
((fail)) && { echo "FAIL (seed $seed)"; exit 1; }
echo "PASS: $shapes draws (seed $seed), the variants of each with the same bits"
