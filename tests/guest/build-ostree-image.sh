#!/usr/bin/env bash
# Builds the ostree-booted test guest: the same Debian bookworm tree as
# build-image.sh, committed into an ostree repo and deployed, as an
# rpm-ostree host is (what both builds share is in guest-tree.sh). Output
# (in a cache dir keyed by a hash of this script, guest-tree.sh and the
# package lists; the last stdout line is that dir):
#   root.img  ext4 physical root (the sysroot: /ostree/repo, /ostree/deploy)
#   boot.img  ext4 /boot (loader entries, kernels): a disk of its own so the
#             launcher can read the default boot entry from it between boots
#             with debugfs, without mounting anything
#   id_ed25519, known_hosts
#
# Recipe: debootstrap -> /etc moved to /usr/etc, /var emptied (it seeds the
# stateroot's var), no device nodes, /sysroot and ostree -> sysroot/ostree,
# kernel and a `dracut --no-hostonly --add ostree` initramfs in
# /usr/lib/modules/$KVER; then ostree admin init-fs, os-init, commit, deploy
# and mkfs.ext4 -d (no loop mounts).
#
#   UA_GUEST_CACHE, UA_GUEST_MIRROR  as for build-image.sh
#
# Needs root, debootstrap, e2fsprogs, ostree and ssh-keygen.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suite=bookworm
osname=debian
ref=debian/bookworm
root_size=6G
boot_size=256M
name=ostree
# Kernel arguments of the deployment: the launcher boots what the default
# boot entry says, so these are the guest's command line.
kargs=(root=/dev/vda rw rootfstype=ext4 console=ttyS0,115200 systemd.unified_cgroup_hierarchy=1 mitigations=off)
# shellcheck source=guest-tree.sh
. "$here/guest-tree.sh"

guest_need_tools ostree
guest_begin "ostree-$(cat "${BASH_SOURCE[0]}" "$here/guest-tree.sh" "$here/packages.txt" "$here/packages-ostree.txt" |
  sha256sum | cut -c1-16)"
# ostree marks deployment roots immutable: clear that before removing.
unfreeze() { chattr -i "$1"/ostree/deploy/*/deploy/*.[0-9]* 2>/dev/null || true; }
guest_cleanup_extra() { unfreeze "$work/sysroot"; }
guest_debootstrap "$here/packages.txt" "$here/packages-ostree.txt"

# debootstrap resolves the kernel's "initramfs-tools | linux-initramfs-tool"
# to its first choice; dracut provides the second and conflicts with it.
sed -i -E '/^initramfs-tools(-core)? /d' "$tree/debootstrap/debpaths"
sed -i -E 's/(^| )initramfs-tools(-core)?( |$)/ /g; s/(^| )initramfs-tools(-core)?( |$)/ /g' "$tree/debootstrap/base"

# dracut's kernel hook reads this during the second stage: generic (the
# image boots on other "hardware" than the build host), with ostree's module.
mkdir -p "$tree/etc/dracut.conf.d"
cat >"$tree/etc/dracut.conf.d/ua-guest.conf" <<'CONF'
hostonly="no"
add_dracutmodules+=" ostree "
omit_dracutmodules+=" plymouth i18n lvm dm mdraid multipath crypt nfs iscsi nbd fcoe btrfs "
# gzip -1: -9 takes minutes on a loaded 2-core host to save a few MB.
compress="gzip -1 -n"
CONF

guest_second_stage
# / is the deployment (ostree-prepare-root mounts it): not listed. /boot is
# its own disk (see the header).
guest_configure "/dev/vdc  /boot          ext4  defaults,noatime  0 0
/dev/vdb  /var/lib/data  xfs   defaults,noatime,x-systemd.device-timeout=300s  0 0"
# ostree's shutdown hook: finalizes a staged deployment unless it is locked.
chroot "$tree" systemctl enable ostree-finalize-staged.path >/dev/null 2>&1 || true

kver=$(ls "$tree/lib/modules" | sort -V | tail -1)
[ -n "$kver" ] || die "no kernel installed in the tree"
log "dracut for $kver"
chroot "$tree" dracut --no-hostonly --add ostree --force "/usr/lib/modules/$kver/initramfs.img" "$kver" \
  >"$work/dracut.log" 2>&1 || { tail -30 "$work/dracut.log" >&2; die "dracut failed"; }
cp "$tree/boot/vmlinuz-$kver" "$tree/usr/lib/modules/$kver/vmlinuz"
log "initramfs $(du -h "$tree/usr/lib/modules/$kver/initramfs.img" | cut -f1)"

log "making the ostree commit"
# The tree as ostree wants it: /etc is the default config in /usr/etc, /var
# starts empty (it seeds the stateroot's var below), no device nodes, the
# physical root appears at /sysroot and its repo at /ostree.
guest_unmount
mv "$tree/etc" "$tree/usr/etc"
mv "$tree/var" "$work/var"
mkdir "$tree/var"
rm -rf "$tree"/dev/* "$tree"/boot/* "$tree"/proc/* "$tree"/sys/* "$tree"/run/* "$tree"/tmp/* "$tree/debootstrap"
mkdir -p "$tree/sysroot"
ln -s sysroot/ostree "$tree/ostree"

sysroot=$work/sysroot
mkdir -p "$sysroot"
ostree admin init-fs "$sysroot" >&2
ostree admin --sysroot="$sysroot" os-init "$osname" >&2
ostree --repo="$sysroot/ostree/repo" config set sysroot.bootloader none
ostree --repo="$sysroot/ostree/repo" commit -b "$ref" --tree=dir="$tree" \
  --add-metadata-string=version=base -s "ua-guest base" >&2
rm -rf --one-file-system "$tree"
karg_flags=()
for a in "${kargs[@]}"; do karg_flags+=("--karg=$a"); done
ostree admin --sysroot="$sysroot" deploy --os="$osname" "${karg_flags[@]}" "$ref" >&2
cp -a "$work/var/." "$sysroot/ostree/deploy/$osname/var/"
rm -rf "$work/var"

# /boot to its own disk; the physical root keeps an empty /boot (no
# loader symlink there, so ostree-prepare-root leaves /boot to fstab).
log "boot entries: $(ls "$sysroot/boot/loader/entries")"
truncate -s "$boot_size" "$work/out/boot.img"
mkfs.ext4 -q -F -L ua-boot -d "$sysroot/boot" "$work/out/boot.img"
rm -rf "${sysroot:?}"/boot/*
truncate -s "$root_size" "$work/out/root.img"
mkfs.ext4 -q -F -L ua-root -E lazy_itable_init=0,lazy_journal_init=0 -d "$sysroot" "$work/out/root.img"
chmod 0444 "$work/out/root.img" "$work/out/boot.img"
echo "$kver" >"$work/out/kernel-version"
unfreeze "$sysroot"
rm -rf --one-file-system "$sysroot"

guest_finish
