# The parts build-image.sh and build-ostree-image.sh share: the cache, the
# debootstrap run and the configuration of the guest's tree. Sourced, not
# run; the caller sets `here`, `name` (for log lines) and `suite`, then calls
# the functions in order:
#   guest_begin KEY       cached image: print it and exit; else lock the cache,
#                         make $work (removed on exit) and set $tree, $img
#   guest_debootstrap PKG_FILE...   first stage (run guest_second_stage after
#                         preparing the tree for the packages' postinsts)
#   guest_configure FSTAB the tree: host name, fstab, bfq, network, journal,
#                         quiet timers, ssh keys (the client's in $work/out)
#   guest_finish          mark $work/out ready and move it to $img

cache=${UA_GUEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/update-agent-guest}

log() { echo "guest image${name:+ ($name)}: $*" >&2; }
die() { log "$*"; exit 1; }

# guest_need_tools TOOL...: root and the host tools the build needs.
guest_need_tools() {
  [ "$(id -u)" = 0 ] || die "must run as root (debootstrap and chroot need it)"
  local tool
  for tool in debootstrap mkfs.ext4 ssh-keygen flock sha256sum "$@"; do
    command -v "$tool" >/dev/null || die "$tool not found (apt-get install debootstrap e2fsprogs openssh-client $*)"
  done
}

guest_begin() {
  img=$cache/images/$1
  mkdir -p "$cache/images" "$cache/debs"
  if [ -f "$img/ready" ]; then
    touch "$img/ready"
    log "cached $img"
    echo "$img"
    exit 0
  fi
  # One build at a time per cache (several test binaries may start at once).
  exec 9>"$cache/lock"
  flock -w 1800 9 || die "timed out waiting for $cache/lock"
  if [ -f "$img/ready" ]; then
    log "cached $img (built by another run)"
    echo "$img"
    exit 0
  fi
  start=$(date +%s)
  work=$(mktemp -d "$cache/build.$1.XXXXXX")
  tree=$work/tree
  trap guest_cleanup EXIT
}

# guest_unmount: debootstrap's second stage mounts /proc and /sys in the
# tree: unmount before deleting or committing, so nothing walks into the
# host's /proc.
guest_unmount() {
  local m
  for m in proc sys dev/pts; do
    mountpoint -q "$tree/$m" 2>/dev/null && umount -l "$tree/$m" || true
  done
}

guest_cleanup() {
  guest_unmount
  [ "$(type -t guest_cleanup_extra)" = function ] && guest_cleanup_extra
  rm -rf --one-file-system "$work"
}

# guest_debootstrap PKG_FILE...: the first stage (--foreign, so the caller
# can set up the initramfs tool before the kernel's postinst runs it in the
# second stage) with the packages of the lists.
guest_debootstrap() {
  local pkgs
  pkgs=$(cat "$@" | grep -v '^[[:space:]]*#' | tr -s '[:space:]' '\n' | grep -v '^$' | paste -sd, -)
  log "debootstrap $suite minbase + $pkgs"
  local mirror=()
  [ -n "${UA_GUEST_MIRROR:-}" ] && mirror=("$UA_GUEST_MIRROR")
  debootstrap --variant=minbase --foreign --include="$pkgs" --cache-dir="$cache/debs" \
    "$suite" "$tree" "${mirror[@]}" >"$work/debootstrap.log" 2>&1 ||
    { tail -30 "$work/debootstrap.log" >&2; die "debootstrap (first stage) failed"; }
}

guest_second_stage() {
  chroot "$tree" /debootstrap/debootstrap --second-stage >"$work/second-stage.log" 2>&1 ||
    { tail -30 "$work/second-stage.log" >&2; tail -30 "$tree/debootstrap/debootstrap.log" >&2 || true
      die "debootstrap (second stage) failed"; }
}

# guest_configure FSTAB: everything both guests have alike. The data disk
# (vdb, XFS, made by the test helper on the host) holds the ostree repo and
# etcd data, as on RHCOS/FCOS; the helper always attaches it: an absent
# disk in fstab would hold boot up for the device timeout.
guest_configure() {
  log "configuring"
  echo ua-guest >"$tree/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 ua-guest\n::1 localhost\n' >"$tree/etc/hosts"
  mkdir -p "$tree/var/lib/data"
  printf '%s\n' "$1" >"$tree/etc/fstab"

  # bfq is a module; the agent selects it per disk (virtio-blk defaults to none).
  echo bfq >"$tree/etc/modules-load.d/bfq.conf"

  # qemu user-mode networking: fixed address, no DHCP wait.
  mkdir -p "$tree/etc/systemd/network"
  cat >"$tree/etc/systemd/network/10-eth.network" <<'CONF'
[Match]
Name=e*

[Network]
Address=10.0.2.15/24
Gateway=10.0.2.2
CONF
  chroot "$tree" systemctl enable systemd-networkd.service >/dev/null 2>&1

  # Persistent journal: tests read entries from before a reboot.
  mkdir -p "$tree/var/log/journal"

  # Nothing periodic that would add I/O noise to measurements (and no network).
  local u
  for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
           xfs_scrub_all.timer getty@tty1.service; do
    ln -sf /dev/null "$tree/etc/systemd/system/$u"
  done

  # ssh: one host key and one client key per image.
  rm -f "$tree"/etc/ssh/ssh_host_*
  ssh-keygen -q -t ed25519 -N '' -C ua-guest-host -f "$tree/etc/ssh/ssh_host_ed25519_key"
  mkdir -p "$tree/etc/ssh/sshd_config.d"
  cat >"$tree/etc/ssh/sshd_config.d/ua-guest.conf" <<'CONF'
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
UseDNS no
MaxSessions 50
MaxStartups 50:30:100
CONF
  mkdir -p "$work/out"
  ssh-keygen -q -t ed25519 -N '' -C ua-guest-test -f "$work/out/id_ed25519"
  install -d -m 0700 "$tree/root/.ssh"
  install -m 0600 "$work/out/id_ed25519.pub" "$tree/root/.ssh/authorized_keys"
  echo "ua-guest $(cut -d' ' -f1-2 "$tree/etc/ssh/ssh_host_ed25519_key.pub")" >"$work/out/known_hosts"

  chroot "$tree" apt-get clean
  rm -rf "$tree"/var/lib/apt/lists/* "$tree"/var/cache/man "$tree"/usr/share/doc/* "$tree"/usr/share/man/* \
    "$tree"/usr/share/locale/*
}

guest_finish() {
  local secs=$(( $(date +%s) - start ))
  echo "built $(date -u +%FT%TZ) in ${secs}s" >"$work/out/ready"
  rm -rf "$img"
  mv "$work/out" "$img"
  log "built $img in ${secs}s"
  echo "$img"
}
