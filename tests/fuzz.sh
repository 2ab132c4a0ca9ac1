#!/bin/bash
# fuzz.sh: builds the libFuzzer target tests/fuzz_image.c for TARGET with dataio's image decoders
# (image.c, image_png.c, image_jpeg.c, image_webp.c), transforms and sample function (transform.c,
# resample.c, sample.c, src/rng.c, src/error.c) straight from the sources (clang
# -fsanitize=fuzzer,address,undefined),
# seeds it with `test_image --seeds`, and fuzzes for a bounded time; any crash, leak or broken
# contract fails. Exits 77 (CTest skip) where clang or libFuzzer is missing. Independent of the
# CMake build of vt_dataio, except that the JPEG decoder is the one TEST_IMAGE was built with
# (`test_image --jpeg-decoder`: libjpeg-turbo or stb_image).
# Usage: fuzz.sh png|jpeg|webp WORK_DIR TEST_IMAGE [SECONDS]
# Environment: VT_FUZZ_PNG, VT_FUZZ_WEBP, VT_FUZZ_STB (ON/OFF as configured), VT_FUZZ_STB_INCLUDE (the folder
# of stb_image.h), VT_FUZZ_JPEG (ON/OFF: libjpeg-turbo; default: as TEST_IMAGE), CLANG (default
# clang), VT_FUZZ_STB_LINK=1 to link libstb instead of compiling stb_image from the installed
# header (compiled, it is instrumented: libFuzzer sees coverage inside it and ASan its memory
# accesses; linked, the fuzzer runs blind inside the library). stb_image is compiled in its own
# unit without UBSan: its integer tricks (shifts of negative values) are not ours to fix, its
# memory errors are caught by ASan and are. libjpeg-turbo is the system's, linked: the fuzzer
# runs blind inside it (no coverage, no ASan on its own accesses; a crash still fails), and sees
# everything around it: our source and error managers, scaling, cropped and skipped rows, early
# stops, windows and the crop render over them. libwebp likewise (linked, blind inside): the
# webp target checks our status mapping, the size checks and the crops around it.
set -u
target=${1:?png, jpeg or webp}
work=${2:?work dir}
test_image=${3:?test_image program}
seconds=${4:-20}
source "$(dirname "$0")/fuzz_lib.sh"
on() { case "${1:-}" in ON|on|1|TRUE|true|YES|yes) return 0 ;; esac; return 1; }

# Each target builds only its own decoder: the other path is unreachable through it anyway.
defs=() libs=()
case "$target" in
  png)
    on "${VT_FUZZ_PNG:-ON}" || skip "built without libpng (VT_PNG=OFF)"
    defs+=(-DVT_HAVE_PNG $(pkg-config --cflags libpng 2>/dev/null))
    libs+=($(pkg-config --libs libpng 2>/dev/null || echo -lpng) -lz)
    ;;
  jpeg)
    defs+=(-DVT_FUZZ_JPEG_TARGET)
    # The JPEG decoder of the build under test (every input starts like a JPEG, so only it).
    if [ -z "${VT_FUZZ_JPEG:-}" ]; then
      case "$("$test_image" --jpeg-decoder 2>/dev/null)" in
        libjpeg*) VT_FUZZ_JPEG=ON ;;
        *) VT_FUZZ_JPEG=OFF ;;
      esac
    fi
    if on "$VT_FUZZ_JPEG"; then
      echo "JPEG decoder: libjpeg-turbo (the system library, linked)"
      defs+=(-DVT_HAVE_JPEG $(pkg-config --cflags libjpeg 2>/dev/null))
      libs+=($(pkg-config --libs libjpeg 2>/dev/null || echo -ljpeg))
    elif on "${VT_FUZZ_STB:-ON}"; then
      echo "JPEG decoder: stb_image"
      defs+=(-DVT_HAVE_STB -I"${VT_FUZZ_STB_INCLUDE:-/usr/include/stb}")
      if [ "${VT_FUZZ_STB_LINK:-0}" = 1 ]; then
        libs+=(-lstb)
      else
        printf '#define STB_IMAGE_IMPLEMENTATION\n#define STBI_NO_STDIO\n#include "stb_image.h"\n' \
          > "$work/stb_image_impl.c"
        "$cc" -c -g -O1 -fsanitize=fuzzer-no-link,address -I"${VT_FUZZ_STB_INCLUDE:-/usr/include/stb}" \
          "$work/stb_image_impl.c" -o "$work/stb_image_impl.o" || { echo "FAIL: stb_image"; exit 1; }
        libs+=("$work/stb_image_impl.o")
      fi
    else
      skip "built without libjpeg-turbo and stb_image (VT_JPEG=OFF, VT_STB=OFF)"
    fi
    ;;
  webp)
    on "${VT_FUZZ_WEBP:-ON}" || skip "built without libwebp (VT_WEBP=OFF)"
    defs+=(-DVT_FUZZ_WEBP_TARGET -DVT_HAVE_WEBP)
    libs+=(-lwebp)
    ;;
  *) echo "FAIL: unknown target $target (png, jpeg or webp)"; exit 1 ;;
esac

bin="$work/fuzz_$target"
echo "building $bin"
"$cc" -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -Wall -Wextra -Werror \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I"$src/dataio" -I"$src/src" "${defs[@]}" "$src/tests/fuzz_image.c" \
  "$src/dataio/image.c" "$src/dataio/image_png.c" "$src/dataio/image_jpeg.c" \
  "$src/dataio/image_webp.c" \
  "$src/dataio/transform.c" "$src/dataio/resample.c" "$src/dataio/randaug.c" \
  "$src/dataio/threeaug.c" \
  "$src/dataio/sample.c" "$src/src/rng.c" "$src/src/error.c" \
  -o "$bin" "${libs[@]}" -lm || { echo "FAIL: could not build $bin"; exit 1; }

# Seeds: small PNGs of every colour type, JPEGs and WebPs (Pillow's) of several kinds, made now.
rm -rf "$work/seeds" "$work/corpus_$target"
mkdir -p "$work/corpus_$target"
"$test_image" --seeds "$work/seeds" >/dev/null || { echo "FAIL: test_image --seeds"; exit 1; }
nseeds=$(ls "$work/seeds/$target" | wc -l)
echo "fuzzing $target for ${seconds}s from $nseeds seeds"
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$work/crash_${target}_" \
  "$work/corpus_$target" "$work/seeds/$target" > "$work/fuzz_$target.log" 2>&1
rc=$?
grep -E "^Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss_mb|ERROR|SUMMARY" \
  "$work/fuzz_$target.log" | head -20
if [ $rc -ne 0 ]; then
  tail -60 "$work/fuzz_$target.log"
  echo "FAIL: fuzz_$target exited with $rc; reproducer: $bin $work/crash_${target}_*"
  exit 1
fi
echo "PASS: fuzz_$target, corpus of $(ls "$work/corpus_$target" | wc -l) inputs"
