#!/usr/bin/env bash
# Installs what `make bench` and `make demo` need on a Debian 12 host (the
# same packages CI installs for the guest tests), only those missing.
set -euo pipefail
need=()
for p in qemu-system-x86 qemu-utils debootstrap e2fsprogs xfsprogs openssh-client ostree; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
command -v go >/dev/null || { echo "go 1.26 is needed on PATH" >&2; exit 1; }
