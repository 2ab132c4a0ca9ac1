# fuzz_lib.sh: what the libFuzzer test scripts (fuzz.sh, fuzz_safetensors.sh, fuzz_tar.sh)
# share; sourced after they set `work`. Sets src (the project root) and cc (CLANG, default
# clang), exits 77 (CTest skip) where clang or its libFuzzer runtime is missing, and defines:
#   skip MESSAGE          print SKIP and exit 77
#   fuzz_build BIN FILES  clang -fsanitize=fuzzer,address,undefined of FILES (sources and
#                         flags) into BIN with the project's include folders; fails the test
#   fuzz_run NAME BIN DICT SECONDS
#                         fuzzes BIN from $work/corpus and $work/seeds with dictionary DICT for
#                         SECONDS, prints libFuzzer's figures and fails on any crash, leak, hang
#                         or broken contract (the reproducer named)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cc=${CLANG:-clang}

skip() { echo "SKIP: $*"; exit 77; }

command -v "$cc" >/dev/null 2>&1 || skip "no $cc (apt-get install clang libclang-rt-dev)"
mkdir -p "$work" || exit 1
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\n%s\n' \
  'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
  > "$work/probe.c"
"$cc" -fsanitize=fuzzer,address "$work/probe.c" -o "$work/probe" >/dev/null 2>&1 ||
  skip "$cc cannot link -fsanitize=fuzzer,address (apt-get install libclang-rt-dev)"

fuzz_build() {
  local bin=$1
  shift
  echo "building $bin"
  "$cc" -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -Wall -Wextra -Werror \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I"$src/src" -I"$src/dataio" "$@" -o "$bin" || { echo "FAIL: could not build $bin"; exit 1; }
}

fuzz_run() {
  local name=$1 bin=$2 dict=$3 seconds=$4
  echo "fuzzing $name for ${seconds}s from $(ls "$work/seeds" | wc -l) seeds"
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=64 \
    -max_len=16384 -dict="$dict" -print_final_stats=1 -artifact_prefix="$work/crash_${name}_" \
    "$work/corpus" "$work/seeds" > "$work/fuzz_$name.log" 2>&1
  local rc=$?
  grep -E "^#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss_mb|ERROR|SUMMARY" \
    "$work/fuzz_$name.log" | head -20
  if [ $rc -ne 0 ]; then
    tail -60 "$work/fuzz_$name.log"
    echo "FAIL: fuzz_$name exited with $rc; reproducer: $bin $work/crash_${name}_*"
    exit 1
  fi
  echo "PASS: fuzz_$name, corpus of $(ls "$work/corpus" | wc -l) inputs"
}
