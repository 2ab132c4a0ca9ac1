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
# vt_free_port: a port nobody holds now, below Linux's ephemeral ports (32768 on: the kernel
# gives those to outgoing connections and bind(0), the ranks' own among them, any of which
# could take a port picked from that range before rank 0 listens on it), tried with python3
# where it is here.
vt_free_port() {
  python3 -c '
import random, socket
for _ in range(200):
    p = random.randint(20000, 32767)
    s = socket.socket()
    try:
        s.bind(("", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break' 2>/dev/null | grep . || echo $((20000 + RANDOM % 12768))
}
