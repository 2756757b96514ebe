# Shared by the GPU-host scripts (sourced, from the repository root, after OUT is set):
# progress lines, the host's Debian packages (.devdeps) and the CUDA build.

log() { echo "== $(date +%T) $*" | tee -a "$OUT/setup.log"; }

# The carried Debian packages (CLI11, fmt, toml++, ...) where the host lacks them.
use_devdeps() {
  [ -f .devdeps/use-debs.sh ] && source .devdeps/use-debs.sh .devdeps >> "$OUT/setup.log" 2>&1
  return 0
}

# Configures the cuda preset for sm_90 and builds the given targets (niced: the PyTorch
# comparison may be compiling beside it). On failure prints the log's tail, stops the peer
# ($peer_pid, if set) and exits.
build_cuda() {
  log "build"
  use_devdeps
  if ! cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES=90 >> "$OUT/setup.log" 2>&1 ||
     ! nice -n 19 cmake --build --preset cuda --target "$@" >> "$OUT/setup.log" 2>&1; then
    tail -40 "$OUT/setup.log"
    [ -n "${peer_pid:-}" ] && kill "$peer_pid" 2>/dev/null
    exit 1
  fi
  log "build done"
}
