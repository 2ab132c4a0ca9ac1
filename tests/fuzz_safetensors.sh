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
source "$(dirname "$0")/fuzz_lib.sh"

bin="$work/fuzz_safetensors"
fuzz_build "$bin" "$src/tests/fuzz_safetensors.c" "$src/dataio/safetensors.c" \
  "$src/dataio/safetensors_header.c"

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
fuzz_run safetensors "$bin" "$work/st.dict" "$seconds"
