#!/usr/bin/env bash
# The Debian packages that hold the shared libraries a binary links (ldd, then dpkg -S),
# one per line, sorted: the run stage of the Containerfile installs exactly these.
# usage: runtime-packages.sh BINARY
set -euo pipefail
bin=${1:?usage: runtime-packages.sh BINARY}
[ -x "$bin" ] || { echo "runtime-packages.sh: $bin is not an executable file" >&2; exit 1; }
missing=$(ldd "$bin" | awk '/not found/ {print $1}')
if [ -n "$missing" ]; then
  echo "runtime-packages.sh: $bin links libraries that are not installed: $missing" >&2
  exit 1
fi
# Each resolved library path; dpkg knows a file by the path it installed, so try the path
# as ldd prints it and with /usr/lib and /lib exchanged (Debian 12 merges /lib into /usr/lib).
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
  real=$(readlink -f "$lib")
  for p in "$lib" "$real" "${lib#/usr}" "/usr$lib" "${real#/usr}" "/usr$real"; do
    if owner=$(dpkg -S "$p" 2>/dev/null); then echo "${owner%%:*}"; break; fi
  done
done | sort -u | grep -v -x -e libc6 -e libgcc-s1 -e libstdc++6
