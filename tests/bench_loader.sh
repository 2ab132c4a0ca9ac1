#!/bin/sh
# bench_loader.sh: loader benchmark (CTest label `bench`, not pass/fail; issue 4 check 6): vit3d's
# training loader against torchvision's transforms with Pillow, 1024x1024 PNG and JPEG files to
# 224 px crops, same files and thread counts, in alternating rounds so machine noise hits both.
# Prints both rates, per core, the ratio vit3d/torchvision (target >= 1.5), and the conditions.
# Usage: bench_loader.sh BENCH_LOADER_BINARY. Env: VT_BENCH_IMAGES (64), VT_BENCH_EPOCHS (2, after
# one untimed), VT_BENCH_ROUNDS (3), VT_BENCH_BATCH (16), VT_BENCH_THREADS ("1 2"),
# VT_BENCH_STAGES (1: also a per-stage time split of each side; vit3d's also gives the time of
# a full decode of the same crops and the scales its reduced decode used), PYTHON
# (/usr/bin/python3).
set -u
bin=${1:?usage: bench_loader.sh BENCH_LOADER_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-/usr/bin/python3}
images=${VT_BENCH_IMAGES:-64}
epochs=${VT_BENCH_EPOCHS:-2}
rounds=${VT_BENCH_ROUNDS:-3}
batch=${VT_BENCH_BATCH:-16}
thread_list=${VT_BENCH_THREADS:-1 2}
do_stages=${VT_BENCH_STAGES:-1}
# Before the export below: GNU nproc also obeys OMP_NUM_THREADS.
cores=$(nproc)
# Both sides use exactly their decoder threads / workers; no library may add its own.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

# The data needs numpy and PIL; the comparison needs torchvision too. Without them the benchmark
# cannot even make its files, so it says why and stops (not a failure: it is not pass/fail).
if ! out=$("$py" -c 'import numpy, PIL, torch, torchvision' 2>&1); then
  echo "bench_loader: not measured: cannot import numpy, PIL, torch, torchvision with $py:" \
       "$(printf '%s' "$out" | tail -n 1) (apt-get install python3-torchvision python3-pil)"
  exit 0
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
log=$tmp/log
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "bench_loader: making $images images of 1024x1024 (PNG and JPEG q90) in $tmp"
"$py" "$here/bench_loader.py" make "$tmp/data" "$images" || { echo "failed: making the data"; exit 1; }

# Runs one side, shows its line and keeps it; a crash fails the benchmark.
run_side() {
  "$@" >"$tmp/one" || { cat "$tmp/one"; echo "failed: $*"; exit 1; }
  tee -a "$log" <"$tmp/one"
}
vit3d_side() { run_side "$bin" "$tmp/data/$1" "$2" "$epochs" "$batch" "$1"; }
torch_side() {
  run_side "$py" "$here/bench_loader.py" run "$tmp/data/$1" "$2" "$epochs" "$batch" "$1" "$3"
}

r=1
while [ "$r" -le "$rounds" ]; do
  for fmt in png jpeg; do
    for t in $thread_list; do
      # Which side goes first alternates by round, so a load change mid-round favours neither.
      if [ $((r % 2)) -eq 1 ]; then
        vit3d_side "$fmt" "$t"
        torch_side "$fmt" "$t" workers
        [ "$t" -eq 1 ] && torch_side "$fmt" 1 single
      else
        [ "$t" -eq 1 ] && torch_side "$fmt" 1 single
        torch_side "$fmt" "$t" workers
        vit3d_side "$fmt" "$t"
      fi
    done
  done
  r=$((r + 1))
done
if [ "$do_stages" = 1 ]; then
  for fmt in png jpeg; do
    run_side "$bin" --stages "$tmp/data/$fmt" 1 "$fmt"
    run_side "$py" "$here/bench_loader.py" stages "$tmp/data/$fmt" "$fmt"
  done
fi

# Median over rounds of one field (img_s or img_per_cpu_s) of the lines that match a pattern.
median() {
  grep -E "$1" "$log" | sed -n "s/.* $2=\([0-9.]*\).*/\1/p" | sort -n |
    awk '{ v[NR] = $1 } END { if (!NR) exit 1;
      printf "%.2f\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# Median over rounds of vit3d/torchvision for one field, each round's pair divided on its own:
# the two sides of a round ran seconds apart, so slow changes in the machine's load cancel.
ratio_median() {
  grep -E "$1" "$log" | sed -n "s/.* $3=\([0-9.]*\).*/\1/p" >"$tmp/a"
  grep -E "$2" "$log" | sed -n "s/.* $3=\([0-9.]*\).*/\1/p" >"$tmp/b"
  paste "$tmp/a" "$tmp/b" | awk 'NF == 2 && $2 > 0 { print $1 / $2 }' | sort -n |
    awk '{ v[NR] = $1 } END { if (!NR) exit 1;
      printf "%.2f\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
lib_of() { ldd "$1" 2>/dev/null | awk -v n="$2" '$1 ~ n { print $3; exit }' | xargs -r readlink -f; }
pyv() { "$py" -c "$1" 2>/dev/null; }
kb() { du -k "$tmp/data/$1" | tail -n 1 | awk -v n="$images" '{ printf "%.0f", $1 / n }'; }

echo "== Loader benchmark: 1024x1024 $images images, 2 classes -> RandomResizedCrop 224 + flip + normalise"
echo "conditions: cpu='$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)' cores=$cores" \
     "load_start='$load_start' load_end='$(cut -d' ' -f1-3 /proc/loadavg)'" \
     "epochs=$epochs (+1 untimed) rounds=$rounds batch=$batch"
echo "files: png ~$(kb png) KB (Pillow, zlib level 6), jpeg ~$(kb jpeg) KB (q90, 4:2:0)"
stb_header=$(sed -n 's/.*stb_image - \(v[0-9.]*\).*/\1/p' /usr/include/stb/stb_image.h 2>/dev/null | head -n 1)
echo "vit3d: libpng=$(lib_of "$bin" libpng) zlib=$(lib_of "$bin" libz)" \
     "libjpeg=$(lib_of "$bin" libjpeg)" \
     "stb_image=${stb_header:-?} ($(lib_of "$bin" libstb || true));" \
     "reduced decode for crops (JPEG at 1/2..1/8, windows, early stop: docs/ARCHITECTURE.md, Data)"
echo "torchvision: torch=$(pyv 'import torch; print(torch.__version__)')" \
     "torchvision=$(pyv 'import torchvision; print(torchvision.__version__)')" \
     "PIL=$(pyv 'import PIL; print(PIL.__version__)')" \
     "libjpeg-turbo=$(pyv 'from PIL import features; print(features.check_feature("libjpeg_turbo"))')" \
     "zlib=$(pyv 'from PIL import features; print(features.version("zlib"))')"
echo "img/s: medians over rounds; /core: img/s divided by T (T threads or workers = T cores);"
echo "/cpu: images per CPU-second of all the side's threads and processes (steadier while other"
echo "jobs share the cores); ratio: vit3d / torchvision of the same round, median over rounds."
printf '%-6s %-2s %-17s %8s %8s %10s %8s %6s | %9s %9s %6s\n' format T torchvision \
       vit3d/s tv/s vit3d/core tv/core ratio vit3d/cpu tv/cpu ratio
for fmt in png jpeg; do
  for t in $thread_list; do
    for mode in workers single; do
      [ "$mode" = single ] && [ "$t" -ne 1 ] && continue
      vp="^vit3d format=$fmt mode=threads threads=$t " tp="^torchvision format=$fmt mode=$mode threads=$t "
      v=$(median "$vp" img_s) || continue
      vc=$(median "$vp" img_per_cpu_s)
      tv=$(median "$tp" img_s) || continue
      tc=$(median "$tp" img_per_cpu_s)
      r=$(ratio_median "$vp" "$tp" img_s)
      rc=$(ratio_median "$vp" "$tp" img_per_cpu_s)
      [ "$mode" = workers ] && how="DataLoader w=$t" || how="1 process, w=0"
      awk -v f="$fmt" -v t="$t" -v h="$how" -v v="$v" -v tv="$tv" -v vc="$vc" -v tc="$tc" \
          -v r="$r" -v rc="$rc" 'BEGIN {
        printf "%-6s %-2s %-17s %8.1f %8.1f %10.1f %8.1f %6.2f | %9.1f %9.1f %6.2f\n",
               f, t, h, v, tv, v / t, tv / t, r, vc, tc, rc }' | tee -a "$tmp/table"
    done
  done
done
# The verdict per format takes the least favourable row, on CPU time (the steadier measure).
awk '$2 ~ /^[0-9]+$/ && NF >= 13 { r = $NF; f = $1; if (!(f in lo)) order[++n] = f
    if (!(f in lo) || r < lo[f]) lo[f] = r }
  END { for (i = 1; i <= n; i++) { f = order[i]; printf "%s: vit3d/torchvision per core (CPU time, least favourable row) %.2f: target 1.5 %s\n",
                             f, lo[f], (lo[f] >= 1.5 ? "met" : "NOT met") } }' "$tmp/table"
