#!/usr/bin/env bash
# Builds the ostree-booted test guest: the same Debian bookworm tree as
# build-image.sh, committed into an ostree repo and deployed, as an
# rpm-ostree host is (what both builds share is in guest-tree.sh). Output
# (in a cache dir keyed by a hash of this script, guest-tree.sh and the
# package lists; the last stdout line is that dir):
#   root.img  the physical root (the sysroot: /ostree/repo, /ostree/deploy),
#             ext4 or XFS (UA_GUEST_ROOT_FS)
#   boot.img  ext4 /boot (loader entries, kernels): a disk of its own so the
#             launcher can read the default boot entry from it between boots
#             with debugfs, without mounting anything
#   id_ed25519, known_hosts
#
# Recipe: debootstrap -> /etc moved to /usr/etc, /var emptied (it seeds the
# stateroot's var), no device nodes, /sysroot and ostree -> sysroot/ostree,
# kernel and a `dracut --no-hostonly --add ostree` initramfs in
# /usr/lib/modules/$KVER; then ostree admin init-fs, os-init, commit, deploy
# and mkfs.ext4 -d, or mkfs.xfs -p with a protofile (no loop mounts).
#
#   UA_GUEST_CACHE, UA_GUEST_MIRROR  as for build-image.sh
#   UA_GUEST_ROOT_FS  the physical root's filesystem: ext4 (default) or xfs;
#                     each has its own cache dir (ostree-HASH, ostree-xfs-HASH)
#
# Needs root, debootstrap, e2fsprogs, ostree and ssh-keygen; xfsprogs for xfs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suite=bookworm
osname=debian
ref=debian/bookworm
root_size=6G
boot_size=256M
root_fs=${UA_GUEST_ROOT_FS:-ext4}
case $root_fs in
ext4) name=ostree key_files=() ;;
# The XFS image is the same tree; the protofile generator is part of its key.
xfs) name=ostree-xfs key_files=("$here/xfs-protofile.sh") ;;
*) echo "UA_GUEST_ROOT_FS=$root_fs: want ext4 or xfs" >&2; exit 2 ;;
esac
# Kernel arguments of the deployment: the launcher boots what the default
# boot entry says, so these are the guest's command line. dracut's
# no-hostonly initramfs has both filesystems' modules and fsck helpers.
kargs=(root=/dev/vda rw "rootfstype=$root_fs" console=ttyS0,115200 systemd.unified_cgroup_hierarchy=1 mitigations=off)
# shellcheck source=guest-tree.sh
. "$here/guest-tree.sh"

guest_need_tools ostree
if [ "$root_fs" = xfs ]; then
  for tool in mkfs.xfs xfs_db; do command -v $tool >/dev/null || die "$tool not found (apt-get install xfsprogs)"; done
fi
guest_begin "$name-$(cat "${BASH_SOURCE[0]}" "$here/guest-tree.sh" "$here/packages.txt" "$here/packages-ostree.txt" "${key_files[@]}" |
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
# The host's TMPDIR means nothing inside the chroot.
chroot "$tree" env -u TMPDIR dracut --no-hostonly --add ostree --force "/usr/lib/modules/$kver/initramfs.img" "$kver" \
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

# The XFS root comes from a protofile (xfs-protofile.sh): xfsprogs 6.1 has
# no `mkfs.xfs -d DIR` and there are no loop mounts here. What the format
# cannot carry, and what that costs:
#  - hard links become copies: the base deployment's files, hard links to
#    the repo's objects, are copies of them (the tree is on disk twice);
#    deployments staged in the guest hard-link as usual. ostree does not
#    mind: `ostree fsck` verifies the repo's objects, which are intact.
#  - extended attributes: a bare repo's object checksums cover them, so the
#    commit must have none (checked here; fsck would fail otherwise).
#  - inode flags: the deployment root is not immutable (chattr +i) as ostree
#    leaves it; timestamps are the build's.
#  - the sticky bit (the physical root's /tmp): set afterwards with xfs_db.
make_xfs_root() {
  ostree --repo="$sysroot/ostree/repo" ls -R -X "$ref" >"$work/ls-X" || die "ostree ls -X $ref failed"
  if grep -v -F ' { @a(ayay) [] } ' "$work/ls-X" >"$work/xattrs"; then
    die "the commit has extended attributes, which a protofile cannot carry: $(head -5 "$work/xattrs")"
  fi
  # ucf keeps pristine copies of conffiles for three-way merges on package
  # upgrades (an image built once never gets one), named after their path
  # with ':' for '/': a leading ':' starts a protofile comment. Dropped here,
  # by name; anything else the format cannot carry still fails the build.
  local ucf="$sysroot/ostree/deploy/$osname/var/lib/ucf/cache"
  [ ! -d "$ucf" ] || { log "dropping ucf's cache: $(ls "$ucf" | paste -sd' ' -)"; rm -f "$ucf"/:*; }
  bash "$here/xfs-protofile.sh" "$sysroot" "$work/sticky" >"$work/proto"
  mkfs.xfs -q -f -L ua-root -p "$work/proto" "$work/out/root.img"
  local args=() p m out
  while read -r p m; do args+=(-c "path $p" -c "write core.mode $m"); done <"$work/sticky"
  if [ ${#args[@]} -gt 0 ]; then
    # xfs_db exits 0 whatever a command did: count what it wrote.
    out=$(xfs_db -x "${args[@]}" "$work/out/root.img" 2>&1)
    [ "$(grep -c '^core.mode = ' <<<"$out")" = "$(wc -l <"$work/sticky")" ] ||
      die "xfs_db did not set the sticky bits: $out"
  fi
  log "XFS root: $(wc -l <"$work/proto") protofile lines, sticky: $(cut -d' ' -f1 "$work/sticky" | paste -sd' ' -)"
}

truncate -s "$root_size" "$work/out/root.img"
if [ "$root_fs" = xfs ]; then make_xfs_root; else
  mkfs.ext4 -q -F -L ua-root -E lazy_itable_init=0,lazy_journal_init=0 -d "$sysroot" "$work/out/root.img"
fi
chmod 0444 "$work/out/root.img" "$work/out/boot.img"
echo "$kver" >"$work/out/kernel-version"
unfreeze "$sysroot"
rm -rf --one-file-system "$sysroot"

guest_finish
