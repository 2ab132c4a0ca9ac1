#!/bin/bash
# fuzz_manifest.sh WORK_DIR [SECONDS]: builds tests/fuzz_manifest.c with dataio/checkpoint.c,
# dataio/partfile.c, dataio/ckpt_manifest.c and src/error.c (clang
# -fsanitize=fuzzer,address,undefined), seeds it with a valid manifest and fuzzes for a bounded
# time; any crash, leak or hang fails. Exits 77 (CTest skip) where clang or libFuzzer is missing.
set -u
work=${1:?work dir}
seconds=${2:-15}
src=$(cd "$(dirname "$0")/.." && pwd)
cc=${CLANG:-clang}
command -v "$cc" >/dev/null 2>&1 || { echo "SKIP: no $cc"; exit 77; }
mkdir -p "$work/corpus" || exit 1
bin=$work/fuzz_manifest
"$cc" -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -g -O1 -Wall -Wextra \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I"$src/src" -I"$src/dataio" \
  "$src/tests/fuzz_manifest.c" "$src/dataio/checkpoint.c" "$src/dataio/ckpt_manifest.c" \
  "$src/dataio/partfile.c" "$src/src/error.c" -o "$bin" 2>"$work/build.log" ||
  { grep -q "fuzzer" "$work/build.log" && { echo "SKIP: no libFuzzer runtime"; exit 77; }
    cat "$work/build.log"; echo "FAIL: could not build $bin"; exit 1; }
cat > "$work/corpus/valid" <<'M'
format vit3d-checkpoint-1
step 10
stream_position 160
global_batch 16
adam_t 10
seed 5
img_size 32
patch_size 8
width 64
depth 8
heads 8
mlp_ratio 4
num_classes 10
tp 2
pp 2
dp 2
zero 0
sequence_parallel 0
file model.safetensors 1234 0badc0de
file optim.safetensors 2468 12345678
M
"$bin" "$work/corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 \
  > "$work/fuzz.log" 2>&1
rc=$?
tail -3 "$work/fuzz.log"
[ $rc -eq 0 ] && echo "fuzz_manifest: no crash in $seconds s" || echo "FAIL: fuzz_manifest found a problem (log: $work/fuzz.log)"
exit $rc
