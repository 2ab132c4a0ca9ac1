#!/bin/bash
# fuzz_safetensors.sh: builds tests/fuzz_safetensors.c with dataio/safetensors.c straight from the
# sources (clang -fsanitize=fuzzer,address,undefined), seeds it with `test_safetensors --seeds`
# and a dictionary of the header's words, and fuzzes for a bounded time; any crash, leak, hang
# or broken contract fails. Exits 77 (CTest skip) where clang or libFuzzer is missing.
# Usage: fuzz_safetensors.sh WORK_DIR TEST_SAFETENSORS [SECONDS]   Environment: CLANG.
set -u
work=${1:?work dir}
test_st=${2:?test_safetensors program}
seconds=${3:-20}
src=$(cd "$(dirname "$0")/.." && pwd)
cc=${CLANG:-clang}

skip() { echo "SKIP: $*"; exit 77; }
command -v "$cc" >/dev/null 2>&1 || skip "no $cc (apt-get install clang libclang-rt-dev)"
mkdir -p "$work" || exit 1
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\n%s\n' \
  'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
  > "$work/probe.c"
"$cc" -fsanitize=fuzzer,address "$work/probe.c" -o "$work/probe" >/dev/null 2>&1 ||
  skip "$cc cannot link -fsanitize=fuzzer,address (apt-get install libclang-rt-dev)"

bin="$work/fuzz_safetensors"
echo "building $bin"
"$cc" -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -Wall -Wextra -Werror \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I"$src/src" -I"$src/dataio" "$src/tests/fuzz_safetensors.c" "$src/dataio/safetensors.c" "$src/dataio/safetensors_header.c" \
  -o "$bin" || { echo "FAIL: could not build $bin"; exit 1; }

# Seeds: valid files written now by the writer under test, bare headers, and the header's words.
rm -rf "$work/seeds" "$work/corpus"
mkdir -p "$work/corpus"
"$test_st" --seeds "$work/seeds" >/dev/null || { echo "FAIL: test_safetensors --seeds"; exit 1; }
cat > "$work/st.dict" <<'WORDS'
"{"
"}"
"["
"]"
":"
","
"\""
"\\u"
"\\ud83d\\ude00"
"\\u0000"
"__metadata__"
"dtype"
"shape"
"data_offsets"
"F32"
"F16"
"BF16"
"I32"
"I64"
"U8"
"BOOL"
"F8_E4M3"
"9223372036854775807"
"18446744073709551615"
"4294967296"
"-1"
"1e3"
"1.5"
WORDS
echo "fuzzing safetensors for ${seconds}s from $(ls "$work/seeds" | wc -l) seeds"
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=64 \
  -max_len=16384 \
  -dict="$work/st.dict" -print_final_stats=1 -artifact_prefix="$work/crash_safetensors_" \
  "$work/corpus" "$work/seeds" > "$work/fuzz_safetensors.log" 2>&1
rc=$?
grep -E "^#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss_mb|ERROR|SUMMARY" \
  "$work/fuzz_safetensors.log" | head -20
if [ $rc -ne 0 ]; then
  tail -60 "$work/fuzz_safetensors.log"
  echo "FAIL: fuzz_safetensors exited with $rc; reproducer: $bin $work/crash_safetensors_*"
  exit 1
fi
echo "PASS: fuzz_safetensors, corpus of $(ls "$work/corpus" | wc -l) inputs"
