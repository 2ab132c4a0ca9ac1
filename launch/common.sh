# common.sh: shell pieces shared by the launch scripts (sourced, not run).
# vt_mpirun_flags: Open MPI flags for this environment: root needs explicit permission, and
# every variable the trainer or its libraries read (VT_*, OMP_*, NCCL_*, FI_*, CUDA_*, UCX_*,
# LD_LIBRARY_PATH, PATH) is forwarded to remote ranks with -x.
vt_mpirun_flags() {
  local flags=()
  [ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
  local name
  for name in $(compgen -e); do
    case $name in
      VT_*|OMP_*|NCCL_*|FI_*|CUDA_*|UCX_*|OMPI_MCA_*|LD_LIBRARY_PATH|PATH) flags+=(-x "$name") ;;
    esac
  done
  printf '%s\n' "${flags[@]}"
}

# vt_run LABEL CMD...: prints the exact command (shell-quoted, so it can be pasted), then becomes
# it (exec: a signal to the script's pid, such as a plain kill or a container's stop, reaches
# mpirun, which forwards it to the ranks, instead of ending the shell and orphaning them).
vt_run() {
  local label=$1
  shift
  printf '%s: ' "$label"
  printf '%q ' "$@"
  printf '\n'
  exec "$@"
}
