#!/usr/bin/env bash
# mpirun_hosts.sh: vit3d across hosts with Open MPI and a hostfile ("host slots=N" per line).
#   HOSTFILE=hosts NP=16 launch/mpirun_hosts.sh --tp 4 --pp 2 --device cuda --data DIR ...
# Ranks fill each host's slots in order, so consecutive world ranks - the TP group, the
# innermost mesh axis - share a host; give every host as many slots as it has GPUs. vit3d must
# be at the same path on every host (VIT3D_BIN). MPIRUN_ARGS adds flags, e.g.
# "--mca btl_tcp_if_include eth0". Arguments go to `vit3d train`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/launch/common.sh"
: "${HOSTFILE:?set HOSTFILE to a file of lines like 'node1 slots=8'}"
[ -r "$HOSTFILE" ] || { echo "mpirun_hosts: cannot read HOSTFILE=$HOSTFILE" >&2; exit 2; }
# The ranks: NP, or the slots the hostfile gives (comments, '#' to the end of a line, as Open MPI
# reads them; a host without slots=N gets its core count from Open MPI, unknown here).
read -r slots unsized < <(awk '{ sub(/#.*/, "") } NF { n = 0; for (i = 2; i <= NF; i++)
  if ($i ~ /^slots=/) n = substr($i, 7); if (n > 0) s += n; else u++ } END { print s + 0, u + 0 }' "$HOSTFILE")
if [ -z "${NP:-}" ] && [ "$unsized" -gt 0 ]; then
  echo "mpirun_hosts: $unsized host(s) of $HOSTFILE have no slots=N (Open MPI then gives them" \
    "their core count, unknown here): give each host slots=<its GPUs> or set NP" >&2
  exit 2
fi
np=${NP:-$slots}
bin=${VIT3D_BIN:-$root/build/vit3d}
mapfile -t flags < <(vt_mpirun_flags)
# shellcheck disable=SC2206
extra=(${MPIRUN_ARGS:-})
vt_run mpirun_hosts mpirun -np "$np" --hostfile "$HOSTFILE" --map-by slot "${flags[@]}" "${extra[@]}" \
  "$bin" train "$@"
