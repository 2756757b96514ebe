#!/usr/bin/env bash
# A Debian 12 base image without a registry: debootstrap a minimal root filesystem from
# Debian's apt mirror and import it as localhost/aiscale-debian:12, the Containerfile's
# default base. The root filesystem is kept as a tarball in the cache folder, so a second
# run only imports it.
# usage: make-base.sh [PODMAN_ARGS...]     (e.g. --root DIR --storage-driver vfs)
# environment: AISCALE_PACKAGING_CACHE (default ~/.cache/aiscale-packaging),
#              DEBIAN_MIRROR (default http://deb.debian.org/debian),
#              DEBIAN_SECURITY_MIRROR (default http://deb.debian.org/debian-security)
set -euo pipefail
cache=${AISCALE_PACKAGING_CACHE:-$HOME/.cache/aiscale-packaging}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
image=localhost/aiscale-debian:12
tarball=$cache/debian12-rootfs.tar
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null ||
    { echo "make-base.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
  [ "$(id -u)" -eq 0 ] ||
    { echo "make-base.sh: debootstrap needs root (run as root or with sudo)" >&2; exit 1; }
  work=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  echo "make-base.sh: debootstrap bookworm from $mirror (a few minutes, once)"
  debootstrap --variant=minbase bookworm "$work/root" "$mirror" > "$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; echo "make-base.sh: debootstrap failed (log above)" >&2; exit 1; }
  # Debian's point-release updates and security fixes too, as on an installed system.
  cat > "$work/root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security} bookworm-security main
SOURCES
  rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
  tar -C "$work/root" --numeric-owner -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
fi
if ! podman "$@" image exists "$image"; then
  podman "$@" import --change 'CMD ["/bin/bash"]' "$tarball" "$image" >/dev/null
  echo "make-base.sh: imported $tarball as $image"
fi
