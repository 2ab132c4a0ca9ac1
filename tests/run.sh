#!/usr/bin/env bash
# run.sh: the README's test command. Installs missing Debian packages, configures, builds and
# runs every test a machine without a GPU can run (ctest -LE "cuda|bench"), printing the output
# of any failure. Other labels: `ctest --test-dir build -L bench` (benchmarks),
# `ctest --test-dir build -L cuda` (needs a GPU; tests/gpu/run.sh on a GPU machine).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/launch/build.sh" "$root/build"
cd "$root/build"
# Two at a time where a test needs one core (the PROCESSORS of tests/CMakeLists.txt).
ctest -LE "cuda|bench" -j2 --output-on-failure --timeout 1200 "$@"
