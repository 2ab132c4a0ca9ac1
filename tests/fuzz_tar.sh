#!/bin/bash
# fuzz_tar.sh: builds tests/fuzz_tar.c with dataio/tar.c straight from the sources (clang
# -fsanitize=fuzzer,address,undefined), seeds it with tars Python's tarfile writes in GNU, pax
# and ustar formats (long names, links, folders) and fuzzes for a bounded time; any crash, leak,
# hang or broken contract fails. Exits 77 (CTest skip) where clang, libFuzzer or python3 is
# missing. Usage: fuzz_tar.sh WORK_DIR [SECONDS]   Environment: CLANG, VT_REF_PYTHON.
set -u
work=${1:?work dir}
seconds=${2:-15}
src=$(cd "$(dirname "$0")/.." && pwd)
cc=${CLANG:-clang}
py=${VT_REF_PYTHON:-/usr/bin/python3}

skip() { echo "SKIP: $*"; exit 77; }
command -v "$cc" >/dev/null 2>&1 || skip "no $cc (apt-get install clang libclang-rt-dev)"
command -v "$py" >/dev/null 2>&1 || skip "no $py for the seeds"
mkdir -p "$work" || exit 1
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);\n%s\n' \
  'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
  > "$work/probe.c"
"$cc" -fsanitize=fuzzer,address "$work/probe.c" -o "$work/probe" >/dev/null 2>&1 ||
  skip "$cc cannot link -fsanitize=fuzzer,address (apt-get install libclang-rt-dev)"

bin="$work/fuzz_tar"
echo "building $bin"
"$cc" -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -Wall -Wextra -Werror \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I"$src/src" -I"$src/dataio" "$src/tests/fuzz_tar.c" "$src/dataio/tar.c" "$src/src/error.c" \
  -o "$bin" || { echo "FAIL: could not build $bin"; exit 1; }

rm -rf "$work/seeds" "$work/corpus"
mkdir -p "$work/seeds" "$work/corpus"
"$py" - "$work/seeds" <<'PY' || { echo "FAIL: writing the seeds"; exit 1; }
import io, sys, tarfile
out = sys.argv[1]
for k, fmt in enumerate([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT]):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        d = tarfile.TarInfo("dir"); d.type = tarfile.DIRTYPE; tf.addfile(d)
        long = ["dir/" + "x" * 130, "dir/" + "x" * 170, "p" * 80 + "/" + "x" * 90][k] + ".jpg"
        for i, name in enumerate(["a.png", "a.cls", long,
                                  "p\u00e4x.cls" if fmt != tarfile.USTAR_FORMAT else "b.cls"]):
            data = bytes(range(i * 7 % 256)) * 3
            ti = tarfile.TarInfo(name); ti.size = len(data); tf.addfile(ti, io.BytesIO(data))
        s = tarfile.TarInfo("link"); s.type = tarfile.SYMTYPE; s.linkname = "a.png"; tf.addfile(s)
    open(f"{out}/seed{k}.tar", "wb").write(buf.getvalue())
PY
printf '"ustar\\x0000"\n"ustar  \\x00"\n"././@LongLink"\n" path="\n" size="\n"30 path=x\\x0a"\n' \
  > "$work/tar.dict"
echo "fuzzing tar headers for ${seconds}s from $(ls "$work/seeds" | wc -l) seeds"
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=64 \
  -max_len=16384 -dict="$work/tar.dict" -print_final_stats=1 -artifact_prefix="$work/crash_tar_" \
  "$work/corpus" "$work/seeds" > "$work/fuzz_tar.log" 2>&1
rc=$?
grep -E "^#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss_mb|ERROR|SUMMARY" \
  "$work/fuzz_tar.log" | head -20
if [ $rc -ne 0 ]; then
  tail -60 "$work/fuzz_tar.log"
  echo "FAIL: fuzz_tar exited with $rc; reproducer: $bin $work/crash_tar_*"
  exit 1
fi
echo "PASS: fuzz_tar, corpus of $(ls "$work/corpus" | wc -l) inputs"
