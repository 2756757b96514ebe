#!/usr/bin/env bash
# Checks of the packaging recipes under packaging/ (ctest label `packaging`,
# tests/packaging/CMakeLists.txt).
#   check_packaging.sh recipes [BUILD_DIR]   Spack package.py and EasyBuild easyconfigs:
#       Python syntax, every CMake option they pass is one the project declares, and a
#       CMake configure with exactly the options of their CPU variants. Offline.
#   check_packaging.sh container             the OCI image: a Debian 12 base made by
#       debootstrap (cached under ~/.cache/aiscale-packaging), `podman build` of
#       packaging/container/Containerfile, then the quick start inside the image; the
#       Apptainer image too where apptainer is installed. Needs root or user namespaces
#       and Debian's apt mirror; exits 77 (ctest: skipped) saying why when it cannot run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
skip() { echo "check_packaging: SKIPPED: $*"; exit 77; }
die() { echo "check_packaging: FAILED: $*" >&2; exit 1; }

recipes() {
  local build=${1:-}
  for f in packaging/spack/packages/aiscale/package.py packaging/easybuild/*.eb; do
    python3 - "$f" <<'PY' || die "$f is not valid Python"
import sys
src = open(sys.argv[1]).read()
compile(src, sys.argv[1], "exec")
PY
  done
  python3 -m py_compile packaging/recipe_options.py
  echo "check_packaging: Python syntax of package.py and the easyconfigs: ok"
  # Every -D option of every recipe and variant against the CMake cache variables the
  # project declares (option() and set(... CACHE ...)) and CMake's own variables.
  python3 packaging/recipe_options.py check CMakeLists.txt
  # A configure with exactly the options of the CPU variants: any option the project
  # ignores is an error (CMake's "Manually-specified variables were not used").
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  for recipe in spack easybuild; do
    mapfile -t args < <(python3 packaging/recipe_options.py args "$recipe" cpu)
    echo "check_packaging: cmake configure with the $recipe CPU options: ${args[*]}"
    if ! cmake -S . -B "$tmp/$recipe" -G Ninja -Wdev "${args[@]}" > "$tmp/$recipe.log" 2>&1; then
      cat "$tmp/$recipe.log" >&2; die "cmake configure with the $recipe CPU options failed"
    fi
    if grep -q "Manually-specified variables were not used" "$tmp/$recipe.log"; then
      sed -n '/Manually-specified variables/,/^$/p;/^ *[A-Z_]*$/p' "$tmp/$recipe.log" >&2
      die "the $recipe CPU options name variables the project does not use"
    fi
    grep -q "aiscale: CUDA backend *$" "$tmp/$recipe.log" ||
      grep -q "aiscale: CUDA backend OFF" "$tmp/$recipe.log" ||
      die "the $recipe CPU variant configured a CUDA backend"
  done
  echo "check_packaging: recipes: ok"
}

container() {
  local cache=${AISCALE_PACKAGING_CACHE:-$HOME/.cache/aiscale-packaging}
  export AISCALE_PACKAGING_CACHE=$cache
  command -v podman >/dev/null || skip "podman is not installed (apt-get install podman)"
  [ -s "$cache/debian12-rootfs.tar" ] || command -v debootstrap >/dev/null ||
    skip "debootstrap is not installed and no cached root filesystem (apt-get install debootstrap)"
  [ -s "$cache/debian12-rootfs.tar" ] || [ "$(id -u)" -eq 0 ] ||
    skip "debootstrap needs root and no root filesystem is cached in $cache"
  if [ ! -s "$cache/debian12-rootfs.tar" ]; then
    local mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
    local host=${mirror#*://}; host=${host%%/*}
    timeout 20 bash -c "exec 3<>/dev/tcp/${host%%:*}/80" 2>/dev/null ||
      skip "Debian's mirror $host cannot be reached and no root filesystem is cached in $cache (DEBIAN_MIRROR names another)"
  fi
  [ -r /usr/share/games/fortunes/fortunes ] ||
    skip "the quick start's text is missing (apt-get install fortunes-min)"
  # A storage of its own under the cache (layers and the build's ccache survive between
  # runs); overlay where the kernel allows it, else vfs (copies, slower, always works).
  local driver=${AISCALE_PODMAN_STORAGE:-}
  local base=(--root "$cache/storage" --runroot "$cache/run" --cgroup-manager cgroupfs --events-backend file)
  if [ -z "$driver" ]; then
    driver=vfs
    if podman "${base[@]}" --storage-driver overlay info >/dev/null 2>&1; then driver=overlay; fi
  fi
  local P=("${base[@]}" --storage-driver "$driver")
  # Every change of the sources leaves the previous images' layers behind (podman keeps
  # them for its cache); past AISCALE_PACKAGING_MAX_GB (default 8) the storage starts
  # afresh: one slower run (the apt layers again; the compiles stay in ccache).
  local used_kb
  used_kb=$(du -sk "$cache/storage" 2>/dev/null | cut -f1 || echo 0)
  if [ "${used_kb:-0}" -gt $(( ${AISCALE_PACKAGING_MAX_GB:-8} * 1024 * 1024 )) ]; then
    echo "check_packaging: the image storage holds $((used_kb / 1024 / 1024)) GB: starting it afresh"
    podman "${P[@]}" system reset --force >/dev/null 2>&1 || rm -rf "$cache/storage" "$cache/run"
  fi
  podman "${P[@]}" info > "$cache/podman-info.log" 2>&1 ||
    skip "podman cannot start here ($(tail -1 "$cache/podman-info.log")); it needs root or user namespaces"
  echo "check_packaging: podman $(podman --version | awk '{print $3}'), storage $driver, as uid $(id -u)"
  local t0=$SECONDS
  bash packaging/container/make-base.sh "${P[@]}" || die "no Debian 12 base image (make-base.sh above)"
  # The first way of starting containers that works here: podman's defaults, then with the
  # resource limits this shell already has (a root without CAP_SYS_RESOURCE cannot raise
  # them to podman's defaults), then also runc (crun refuses hosts whose cgroup v2
  # hierarchy holds controllers beside cgroup v1's). R: the options of build and run.
  local nofile nproc R=() probe="" opts
  nofile="$(ulimit -Sn):$(ulimit -Hn)"
  nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] || [ "$nproc" -gt 16384 ] && nproc=16384
  for opts in "" "--ulimit nofile=$nofile --ulimit nproc=$nproc:$nproc" \
              "--runtime runc --ulimit nofile=$nofile --ulimit nproc=$nproc:$nproc"; do
    read -r -a R <<< "$opts"
    probe=$(podman "${P[@]}" run --rm "${R[@]}" --network host localhost/aiscale-debian:12 echo ok 2>&1 || true)
    [ "$probe" = ok ] && break
  done
  [ "$probe" = ok ] || skip "podman cannot run a container here: $probe"
  echo "check_packaging: containers start with: ${opts:-the defaults of podman}"
  echo "check_packaging: base image ready ($((SECONDS - t0)) s)"
  # The build context: the tracked and new files of the work tree (no build folders), and
  # the npm folders the install takes the GPT-2 vocabulary and chart libraries from.
  local ctx
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' RETURN
  git ls-files -co --exclude-standard -z | grep -zv '^third_party_npm' | tar --null -T - -cf - | tar -C "$ctx" -xf -
  if [ -d third_party_npm/node_modules ]; then
    mkdir -p "$ctx/third_party_npm/node_modules"
    for m in gpt-3-encoder vega vega-lite vega-embed; do
      [ -d "third_party_npm/node_modules/$m" ] && cp -rL "third_party_npm/node_modules/$m" "$ctx/third_party_npm/node_modules/"
    done
  fi
  # The source at this checkout's own path and the host's compiler cache: the image's
  # compiles of sources the host has built (scripts/test.sh builds first) are cache hits.
  local ccache_args=()
  local host_ccache=${CCACHE_DIR:-$HOME/.cache/ccache}
  if [ -d "$host_ccache" ]; then
    ccache_args=(-v "$host_ccache:/host-ccache" --build-arg CCACHE_DIR=/host-ccache)
  fi
  t0=$SECONDS
  podman "${P[@]}" build "${R[@]}" --network host --layers -f packaging/container/Containerfile \
    --build-arg SRC_DIR="$root" "${ccache_args[@]}" -t localhost/aiscale:check "$ctx" > "$cache/build.log" 2>&1 ||
    { tail -40 "$cache/build.log" >&2; die "podman build failed (the last lines above; all in $cache/build.log)"; }
  echo "check_packaging: image built ($((SECONDS - t0)) s): $(podman "${P[@]}" image inspect --format '{{.Size}}' localhost/aiscale:check | awk '{printf "%.0f MB", $1/1e6}')"
  # The quick start inside the image: tokenize the fortunes, train on 2 MPI ranks, sample,
  # report; the image's data (GPT-2 vocabulary, configs) from its share/aiscale.
  local work
  work=$(mktemp -d)
  t0=$SECONDS
  podman "${P[@]}" run --rm "${R[@]}" --network host -v /usr/share/games/fortunes:/fortunes:ro \
    -v "$work":/work -e OMPI_ALLOW_RUN_AS_ROOT=1 -e OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    --entrypoint /bin/bash localhost/aiscale:check -c '
      set -e
      aiscale --version
      aiscale data tokenize --input /fortunes --output-prefix data/fortunes/fortunes --fortune
      aiscale launch -n 2 -- train --config /opt/aiscale/share/aiscale/configs/quickstart.toml \
        --set train.steps=20 --set train.eval_every=10 --set run.name=container --quiet
      aiscale sample --run runs/container --prompt "The meaning of life is" --tokens 20 --seed 1
      aiscale report runs/container -o runs/container/report.html' > "$cache/run.log" 2>&1 ||
    { cat "$cache/run.log" >&2; rm -rf "$work"; die "the quick start failed inside the image (output above)"; }
  cat "$cache/run.log"
  grep -q '"status": *"finished"' "$work/runs/container/summary.json" ||
    { rm -rf "$work"; die "the run in the image did not finish (summary.json)"; }
  [ -s "$work/runs/container/report.html" ] || { rm -rf "$work"; die "no report.html from the image"; }
  rm -rf "$work"
  echo "check_packaging: quick start in the image: ok ($((SECONDS - t0)) s)"
  # The Apptainer image from the OCI image, where apptainer (or singularity) is installed.
  local apptainer
  apptainer=$(command -v apptainer || command -v singularity || true)
  if [ -n "$apptainer" ]; then
    podman "${P[@]}" save --format oci-archive -o "$cache/aiscale.oci.tar" localhost/aiscale:check
    (cd "$cache" && sed 's|^From: .*|From: aiscale.oci.tar|' "$root/packaging/container/aiscale.def" > aiscale.def &&
      "$apptainer" build --force aiscale.sif aiscale.def > apptainer.log 2>&1 &&
      "$apptainer" run aiscale.sif --version) || die "apptainer build or run failed ($cache/apptainer.log)"
    echo "check_packaging: apptainer image: ok"
  else
    echo "check_packaging: apptainer is not installed: aiscale.def was not built (Debian 12 has no apptainer package)"
  fi
}

case ${1:-} in
  recipes) shift; recipes "$@" ;;
  container) container ;;
  *) echo "usage: check_packaging.sh recipes | container" >&2; exit 2 ;;
esac
