#!/usr/bin/env bash
# build.sh [BUILD_DIR] [cmake args...]: installs the Debian packages vit3d needs that are missing
# (launch/debian-packages.txt; as root, or through sudo), then configures and builds vit3d.
# Used by the quick start and by tests/run.sh so both work on a fresh machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
mapfile -t pkgs < <(grep -v -e '^#' -e '^$' "$root/launch/debian-packages.txt")
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "build.sh: installing missing Debian packages: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build" -j "$jobs"
