#!/usr/bin/env bash
# mpirun_local.sh: vit3d on one host with Open MPI, one rank per GPU (or per share of the cores).
#   NP=8 launch/mpirun_local.sh --tp 2 --pp 2 --model vit-b16 --data DIR --save runs/b16 ...
# NP: ranks (default 8). Arguments go to `vit3d train`. More ranks than cores are allowed
# (--oversubscribe, and idle ranks yield their core instead of spinning). MPIRUN_ARGS adds
# mpirun flags. Preemption: send SIGUSR1 to this script's pid, which becomes mpirun (it forwards
# it); the trainer checkpoints and exits 75.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/launch/common.sh"
np=${NP:-8}
[[ $np =~ ^[1-9][0-9]*$ ]] || { echo "mpirun_local.sh: NP=$np: give the number of ranks (NP=8)" >&2; exit 2; }
bin=${VIT3D_BIN:-$root/build/vit3d}
mapfile -t flags < <(vt_mpirun_flags)
cores=$(nproc)
if [ "$np" -gt "$cores" ]; then  # (as mpirun flags: the printed command pastes as it ran)
  flags+=(--oversubscribe --mca mpi_yield_when_idle 1)
fi
# shellcheck disable=SC2206
extra=(${MPIRUN_ARGS:-})  # more mpirun flags, as mpirun_hosts.sh takes them
vt_run mpirun_local mpirun -np "$np" "${flags[@]}" "${extra[@]}" "$bin" train "$@"
