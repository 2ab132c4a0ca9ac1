#!/bin/bash
# fuzz_tar.sh: builds tests/fuzz_tar.c with dataio/tar.c straight from the sources (clang
# -fsanitize=fuzzer,address,undefined), seeds it with tars Python's tarfile writes in GNU, pax
# and ustar formats (long names, links, folders) and fuzzes for a bounded time; any crash, leak,
# hang or broken contract fails. Exits 77 (CTest skip) where clang, libFuzzer or python3 is
# missing. Usage: fuzz_tar.sh WORK_DIR [SECONDS]   Environment: CLANG, VT_REF_PYTHON.
set -u
work=${1:?work dir}
seconds=${2:-15}
py=${VT_REF_PYTHON:-/usr/bin/python3}
source "$(dirname "$0")/fuzz_lib.sh"
command -v "$py" >/dev/null 2>&1 || skip "no $py for the seeds"

bin="$work/fuzz_tar"
fuzz_build "$bin" "$src/tests/fuzz_tar.c" "$src/dataio/tar.c" "$src/src/error.c"

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
fuzz_run tar "$bin" "$work/tar.dict" "$seconds"
