#!/usr/bin/env bash
# Builds the test guest: Debian bookworm (debootstrap minbase) with systemd,
# a small initramfs and a root image made by `mkfs.ext4 -d` (no loop mounts).
#
# The image lands in a cache outside the repo, keyed by a hash of this script
# and packages.txt, so a second run reuses it. Prints the image directory as
# the last line of stdout; progress goes to stderr.
#
#   UA_GUEST_CACHE   cache directory (default $XDG_CACHE_HOME/update-agent-guest,
#                    else ~/.cache/update-agent-guest)
#   UA_GUEST_MIRROR  Debian mirror URL (default: debootstrap's own)
#
# Needs root (debootstrap, chroot, file ownership in the image), debootstrap,
# e2fsprogs and ssh-keygen.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pkgs_file=$here/packages.txt
cache=${UA_GUEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/update-agent-guest}
suite=bookworm
root_size=6G

log() { echo "guest image: $*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap and chroot need it)"
for tool in debootstrap mkfs.ext4 ssh-keygen flock sha256sum; do
  command -v "$tool" >/dev/null || die "$tool not found (apt-get install debootstrap e2fsprogs openssh-client)"
done

key=$(cat "${BASH_SOURCE[0]}" "$pkgs_file" | sha256sum | cut -c1-16)
img=$cache/images/$key
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
work=$(mktemp -d "$cache/build.$key.XXXXXX")
cleanup() {
  # debootstrap's second stage mounts /proc and /sys in the tree: unmount
  # before deleting so rm never walks into the host's /proc.
  for m in proc sys dev/pts; do
    mountpoint -q "$work/tree/$m" 2>/dev/null && umount -l "$work/tree/$m" || true
  done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
tree=$work/tree

pkgs=$(grep -v '^[[:space:]]*#' "$pkgs_file" | tr -s '[:space:]' '\n' | grep -v '^$' | paste -sd, -)
log "debootstrap $suite minbase + $pkgs"
mirror=()
[ -n "${UA_GUEST_MIRROR:-}" ] && mirror=("$UA_GUEST_MIRROR")
# --foreign first so the initramfs settings are in place before the kernel
# package's postinst builds the initramfs (MODULES=most would be ~5x larger).
debootstrap --variant=minbase --foreign --include="$pkgs" --cache-dir="$cache/debs" \
  "$suite" "$tree" "${mirror[@]}" >"$work/debootstrap.log" 2>&1 ||
  { tail -30 "$work/debootstrap.log" >&2; die "debootstrap (first stage) failed"; }

mkdir -p "$tree/etc/initramfs-tools/conf.d" "$tree/usr/share/initramfs-tools/modules.d"
cat >"$tree/etc/initramfs-tools/conf.d/ua-guest.conf" <<'CONF'
# Only what the guest's root disk needs; Debian's initramfs has no zstd here.
MODULES=list
COMPRESS=gzip
CONF
printf '%s\n' virtio_pci virtio_blk ext4 xfs >"$tree/usr/share/initramfs-tools/modules.d/ua-guest"

chroot "$tree" /debootstrap/debootstrap --second-stage >"$work/second-stage.log" 2>&1 ||
  { tail -30 "$work/second-stage.log" >&2; tail -30 "$tree/debootstrap/debootstrap.log" >&2 || true
    die "debootstrap (second stage) failed"; }

log "configuring"
echo ua-guest >"$tree/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 ua-guest\n::1 localhost\n' >"$tree/etc/hosts"

# The data disk (vdb, XFS, made by the test helper on the host) holds the
# ostree repo and etcd data, as on RHCOS/FCOS. The helper always attaches it:
# an absent disk listed here would hold boot up for the device timeout.
mkdir -p "$tree/var/lib/data"
cat >"$tree/etc/fstab" <<'CONF'
/dev/vda  /              ext4  defaults,noatime  0 1
/dev/vdb  /var/lib/data  xfs   defaults,noatime,x-systemd.device-timeout=300s  0 0
CONF

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

kver=$(ls "$tree/lib/modules" | sort -V | tail -1)
[ -n "$kver" ] || die "no kernel installed in the tree"
[ -f "$tree/boot/initrd.img-$kver" ] || die "no initramfs for $kver"
cp "$tree/boot/vmlinuz-$kver" "$work/out/vmlinuz"
cp "$tree/boot/initrd.img-$kver" "$work/out/initrd.img"
log "kernel $kver, initrd $(du -h "$work/out/initrd.img" | cut -f1)"

# ext4 with eager inode table/journal init (one joined -E: mke2fs keeps the
# last) so no ext4lazyinit I/O runs in the guest during measurements.
truncate -s "$root_size" "$work/out/root.img"
mkfs.ext4 -q -F -L ua-root -E lazy_itable_init=0,lazy_journal_init=0 -d "$tree" "$work/out/root.img"
chmod 0444 "$work/out/root.img"
echo "$kver" >"$work/out/kernel-version"
rm -rf --one-file-system "$tree"

secs=$(( $(date +%s) - start ))
echo "built $(date -u +%FT%TZ) in ${secs}s" >"$work/out/ready"
rm -rf "$img"
mv "$work/out" "$img"
log "built $img in ${secs}s"
echo "$img"
