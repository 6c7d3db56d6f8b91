#!/usr/bin/env bash
# Builds the test guest: Debian bookworm (debootstrap minbase) with systemd,
# a small initramfs and a root image made by `mkfs.ext4 -d` (no loop mounts).
#
# The image lands in a cache outside the repo, keyed by a hash of this script,
# guest-tree.sh (shared with build-ostree-image.sh) and packages.txt, so a
# second run reuses it. Prints the image directory as the last line of
# stdout; progress goes to stderr.
#
#   UA_GUEST_CACHE   cache directory (default $XDG_CACHE_HOME/update-agent-guest,
#                    else ~/.cache/update-agent-guest)
#   UA_GUEST_MIRROR  Debian mirror URL (default: debootstrap's own)
#
# Needs root (debootstrap, chroot, file ownership in the image), debootstrap,
# e2fsprogs and ssh-keygen.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suite=bookworm
root_size=6G
name=
# shellcheck source=guest-tree.sh
. "$here/guest-tree.sh"

guest_need_tools
guest_begin "$(cat "${BASH_SOURCE[0]}" "$here/guest-tree.sh" "$here/packages.txt" | sha256sum | cut -c1-16)"
guest_debootstrap "$here/packages.txt"

# The initramfs settings are in place before the kernel package's postinst
# builds the initramfs (MODULES=most would be ~5x larger).
mkdir -p "$tree/etc/initramfs-tools/conf.d" "$tree/usr/share/initramfs-tools/modules.d"
cat >"$tree/etc/initramfs-tools/conf.d/ua-guest.conf" <<'CONF'
# Only what the guest's root disk needs; Debian's initramfs has no zstd here.
MODULES=list
COMPRESS=gzip
CONF
printf '%s\n' virtio_pci virtio_blk ext4 xfs >"$tree/usr/share/initramfs-tools/modules.d/ua-guest"

guest_second_stage
guest_configure "/dev/vda  /              ext4  defaults,noatime  0 1
/dev/vdb  /var/lib/data  xfs   defaults,noatime,x-systemd.device-timeout=300s  0 0"

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

guest_finish
