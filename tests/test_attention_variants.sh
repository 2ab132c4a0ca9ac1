#!/usr/bin/env bash
# test_attention_variants.sh TEST_CUDA_OPS_EMU PICKS: the mma.sync attention kernels on the CUDA
# emulation in every variant (attention.cu's variant_for) must print the same lines, the bits'
# hashes included (the same bits, the bias gradient's partials too); bf16 only, the precision of
# those kernels (fp32 runs other kernels, which no variant changes):
#   64 and 128 rows per block (VT_ATTN_ROWS) with every cp.async landing as soon as it is issued
#   (EMU_CP_ASYNC=early, emu.cpp: a copy into a tile that other threads still read changes what
#   they read), and with the copies landing at their wait; the backward's dS made again in its
#   dq kernel and stored by its dk/dv kernel (VT_ATTN_DS); and as a run has them by default
#   (each shape's first call times the variants and keeps the fastest), whose picks
#   VT_ATTN_REPORT prints into PICKS; timing every variant of every shape is slow on the
#   emulation, so that run takes each op's first 4 shapes, whose lines must be the others';
#   and with no GPU memory for the stored dS (EMU_MALLOC_FAIL_MIN), the same bits as dS made
#   again, no storing variant timed.
set -uo pipefail
ops=$1 picks=$2
names=("64 rows, dS again, copies early" "128 rows, dS stored, copies early"
       "128 rows, dS again" "64 rows, dS stored" "timed picks")
envs=("EMU_CP_ASYNC=early VT_ATTN_ROWS=64 VT_ATTN_DS=0"
      "EMU_CP_ASYNC=early VT_ATTN_ROWS=128 VT_ATTN_DS=1"
      "VT_ATTN_ROWS=128 VT_ATTN_DS=0" "VT_ATTN_ROWS=64 VT_ATTN_DS=1" "VT_ATTN_REPORT=1")
shapes=("" "" "" "" "--shapes=4")
outs=() fail=0
for i in "${!names[@]}"; do
  # shellcheck disable=SC2086 # the settings split into words
  outs[i]=$(env ${envs[i]} "$ops" --prec=bf16 ${shapes[i]} attention_fwd attention_bwd \
    2>"$picks.$i") ||
    { echo "${outs[i]}"; cat "$picks.$i"; echo "FAIL: ${names[i]}: the op test failed"; fail=1; }
  ((i == 0)) && echo "${outs[0]}"
  if [ -n "${shapes[i]}" ]; then  # fewer shapes: its lines (but the count) among the first run's
    extra=$(grep -vxF -f <(echo "${outs[0]}") <(echo "${outs[i]}" | sed '$d'))
    [ -z "$extra" ] || { echo "FAIL: ${names[i]} printed lines the first run did not:"
                         echo "$extra" | head -20; fail=1; }
    continue
  fi
  ((i > 0)) && [[ ${outs[i]} != "${outs[0]}" ]] && {
    echo "FAIL: ${names[i]} printed other lines than ${names[0]}:"
    diff <(echo "${outs[0]}") <(echo "${outs[i]}") | head -20
    fail=1
  }
done
mv "$picks.4" "$picks" && rm -f "$picks".[0-3]
grep 'vit3d: attention_' "$picks"
grep -q 'attention_fwd B=2 N=197 H=3 D=64: .* kept [0-9]* rows$' "$picks" &&
  grep -q 'attention_bwd B=2 N=197 H=3 D=64: .*dS stored.* kept [0-9]* rows + dS' "$picks" ||
  { echo "FAIL: the timed picks were not reported"; fail=1; }
# Each pick also hashed every variant's outputs: here (the emulation) all must agree.
grep -q 'other bits' "$picks" && { echo "FAIL: a variant's outputs differ in their bits"; fail=1; }
# A GPU without room for the stored dS (every allocation of 1.5 MB or more refused; dS^T of this
# shape takes 2 MiB, nothing else as much): the timed picks leave the storing variants out and
# the backward makes dS again, the bits of VT_ATTN_DS=0 (it stopped with "out of GPU memory").
one=(--prec=bf16 --shape=1,1024,1,64,1 attention_bwd)
want=$(VT_ATTN_ROWS=64 VT_ATTN_DS=0 "$ops" "${one[@]}" 2>&1) ||
  { echo "$want"; echo "FAIL: attention_bwd at N=1024 with VT_ATTN_DS=0"; fail=1; }
got=$(EMU_MALLOC_FAIL_MIN=1500000 VT_ATTN_REPORT=1 "$ops" "${one[@]}" 2>"$picks.room")
if [[ $got != "$want" ]]; then
  echo "$got"; cat "$picks.room"; echo "FAIL: without room for dS the backward failed or differs"
  fail=1
elif ! grep -q 'attention_bwd B=1 N=1024 H=1 D=64: .* kept' "$picks.room" ||
    grep -q 'dS stored' "$picks.room"; then
  cat "$picks.room"; echo "FAIL: without room for dS a variant storing it was timed"; fail=1
else
  echo "ok: no room for the stored dS: $(grep -o 'attention_bwd B=1 N=1024.*' "$picks.room")"
fi
rm -f "$picks.room"
((fail)) && exit 1
echo "PASS: ${#names[@]} variants printed the same lines, and the same bits without room for dS"
