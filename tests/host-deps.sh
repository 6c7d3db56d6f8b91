#!/usr/bin/env bash
# Installs, only where missing, what `make check`, `make e2e`, `make demo`
# and `make bench` need on a Debian 12 host: one list for all of them and for
# CI (.ci/run calls this too), so no target finds a tool missing.
#   ostree                  the rpm-ostree stand-in does real ostree I/O
#   rpm rpm2cpio cpio       the guest e2e installs the agent's RPM
#   qemu-*, debootstrap ... the qemu test guest and its disks
#   iproute2                network namespaces for tests that need real addresses
#   systemd                 journalctl compiles the shipped journal catalog in a test
set -euo pipefail
pkgs=(ostree rpm rpm2cpio cpio qemu-system-x86 qemu-utils debootstrap e2fsprogs xfsprogs
  openssh-client iproute2 systemd)
need=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "tests/host-deps.sh: missing ${need[*]}; run as root to install them" >&2; exit 1; }
  echo "installing: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
command -v go >/dev/null || { echo "go 1.26 is needed on PATH (/usr/local/go/bin)" >&2; exit 1; }

# promtool checks the example alert rules (agent/metrics). It comes in
# Debian's prometheus package, whose postinst would start a Prometheus
# server: take the one binary out of the .deb instead of installing it.
tools="${UA_TOOLS:-$HOME/.cache/update-agent-tools}"
if [ ! -x "$tools/bin/promtool" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  if ! (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1); then
    apt-get update -qq
    (cd "$tmp" && apt-get download -qq prometheus)
  fi
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
  mkdir -p "$tools/bin"
  install -m 0755 "$tmp/x/usr/bin/promtool" "$tools/bin/promtool"
  echo "promtool: $tools/bin/promtool" >&2
fi
