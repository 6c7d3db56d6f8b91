#!/usr/bin/env bash
# Builds the ostree-booted test guest: the same Debian bookworm tree as
# build-image.sh, committed into an ostree repo and deployed, as an
# rpm-ostree host is. Output (in a cache dir keyed by a hash of this script
# and the package lists; the last stdout line is that dir):
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
cache=${UA_GUEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/update-agent-guest}
suite=bookworm
osname=debian
ref=debian/bookworm
root_size=6G
boot_size=256M
# Kernel arguments of the deployment: the launcher boots what the default
# boot entry says, so these are the guest's command line.
kargs=(root=/dev/vda rw rootfstype=ext4 console=ttyS0,115200 systemd.unified_cgroup_hierarchy=1 mitigations=off)

log() { echo "guest image (ostree): $*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap and chroot need it)"
for tool in debootstrap mkfs.ext4 ssh-keygen flock sha256sum ostree; do
  command -v "$tool" >/dev/null || die "$tool not found (apt-get install debootstrap e2fsprogs openssh-client ostree)"
done

key=ostree-$(cat "${BASH_SOURCE[0]}" "$here/packages.txt" "$here/packages-ostree.txt" | sha256sum | cut -c1-16)
img=$cache/images/$key
mkdir -p "$cache/images" "$cache/debs"

if [ -f "$img/ready" ]; then
  touch "$img/ready"
  log "cached $img"
  echo "$img"
  exit 0
fi

exec 9>"$cache/lock"
flock -w 1800 9 || die "timed out waiting for $cache/lock"
if [ -f "$img/ready" ]; then
  log "cached $img (built by another run)"
  echo "$img"
  exit 0
fi

start=$(date +%s)
work=$(mktemp -d "$cache/build.$key.XXXXXX")
# ostree marks deployment roots immutable: clear that before removing.
unfreeze() { chattr -i "$1"/ostree/deploy/*/deploy/*.[0-9]* 2>/dev/null || true; }
cleanup() {
  for m in proc sys dev/pts; do
    mountpoint -q "$work/tree/$m" 2>/dev/null && umount -l "$work/tree/$m" || true
  done
  unfreeze "$work/sysroot"
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
tree=$work/tree

pkgs=$(cat "$here/packages.txt" "$here/packages-ostree.txt" | grep -v '^[[:space:]]*#' |
  tr -s '[:space:]' '\n' | grep -v '^$' | paste -sd, -)
log "debootstrap $suite minbase + $pkgs"
mirror=()
[ -n "${UA_GUEST_MIRROR:-}" ] && mirror=("$UA_GUEST_MIRROR")
debootstrap --variant=minbase --foreign --include="$pkgs" --cache-dir="$cache/debs" \
  "$suite" "$tree" "${mirror[@]}" >"$work/debootstrap.log" 2>&1 ||
  { tail -30 "$work/debootstrap.log" >&2; die "debootstrap (first stage) failed"; }

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

chroot "$tree" /debootstrap/debootstrap --second-stage >"$work/second-stage.log" 2>&1 ||
  { tail -30 "$work/second-stage.log" >&2; tail -30 "$tree/debootstrap/debootstrap.log" >&2 || true
    die "debootstrap (second stage) failed"; }

log "configuring"
echo ua-guest >"$tree/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 ua-guest\n::1 localhost\n' >"$tree/etc/hosts"

# / is the deployment (ostree-prepare-root mounts it): not listed. /boot is
# its own disk (see the header), the data disk as in build-image.sh.
mkdir -p "$tree/var/lib/data"
cat >"$tree/etc/fstab" <<'CONF'
/dev/vdc  /boot          ext4  defaults,noatime  0 0
/dev/vdb  /var/lib/data  xfs   defaults,noatime,x-systemd.device-timeout=300s  0 0
CONF
echo bfq >"$tree/etc/modules-load.d/bfq.conf"
mkdir -p "$tree/etc/systemd/network"
cat >"$tree/etc/systemd/network/10-eth.network" <<'CONF'
[Match]
Name=e*

[Network]
Address=10.0.2.15/24
Gateway=10.0.2.2
CONF
chroot "$tree" systemctl enable systemd-networkd.service >/dev/null 2>&1
# ostree's shutdown hook: finalizes a staged deployment unless it is locked.
chroot "$tree" systemctl enable ostree-finalize-staged.path >/dev/null 2>&1 || true
mkdir -p "$tree/var/log/journal"
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
         xfs_scrub_all.timer getty@tty1.service; do
  ln -sf /dev/null "$tree/etc/systemd/system/$u"
done

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
log "dracut for $kver"
chroot "$tree" dracut --no-hostonly --add ostree --force "/usr/lib/modules/$kver/initramfs.img" "$kver" \
  >"$work/dracut.log" 2>&1 || { tail -30 "$work/dracut.log" >&2; die "dracut failed"; }
cp "$tree/boot/vmlinuz-$kver" "$tree/usr/lib/modules/$kver/vmlinuz"
log "initramfs $(du -h "$tree/usr/lib/modules/$kver/initramfs.img" | cut -f1)"

log "making the ostree commit"
# The tree as ostree wants it: /etc is the default config in /usr/etc, /var
# starts empty (it seeds the stateroot's var below), no device nodes, the
# physical root appears at /sysroot and its repo at /ostree.
for m in proc sys dev/pts; do
  mountpoint -q "$tree/$m" && umount -l "$tree/$m"
done
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

secs=$(( $(date +%s) - start ))
echo "built $(date -u +%FT%TZ) in ${secs}s" >"$work/out/ready"
rm -rf "$img"
mv "$work/out" "$img"
log "built $img in ${secs}s"
echo "$img"
