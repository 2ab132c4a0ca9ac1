#!/bin/bash
# fuzz_label.sh: builds tests/fuzz_label.c with dataio/label.c straight from the sources (clang
# -fsanitize=fuzzer,address,undefined), seeds it with label members (decimal text, JSON objects
# with nested fields, escapes and numbers of every kind) and fuzzes for a bounded time; any
# crash, read past the input or broken contract fails. Exits 77 (CTest skip) where clang or
# libFuzzer is missing. Usage: fuzz_label.sh WORK_DIR [SECONDS]   Environment: CLANG.
set -u
work=${1:?work dir}
seconds=${2:-10}
source "$(dirname "$0")/fuzz_lib.sh"

bin="$work/fuzz_label"
fuzz_build "$bin" "$src/tests/fuzz_label.c" "$src/dataio/label.c" "$src/src/error.c"

rm -rf "$work/seeds" "$work/corpus"
mkdir -p "$work/seeds" "$work/corpus"
i=0
for s in '7' ' 12\n' '-1' '3.5' '{"label": 3}' '{"a": {"label": 9}, "label": 4}' \
         '{"s": "x\\"label\\": 5", "label": 6}' '{"label": "3"}' '{"label": [1]}' \
         '{"label":-2}' '{"label": 1e3}' '{"x": 0, "label":  17 }' '[{"label": 1}]' '{'; do
  printf '%b' "$s" > "$work/seeds/s$i"; i=$((i + 1))
done
printf '"\\"label\\""\n"{"\n"}"\n":"\n"\\\\"\n' > "$work/label.dict"
fuzz_run label "$bin" "$work/label.dict" "$seconds"
