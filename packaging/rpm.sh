#!/usr/bin/env bash
# Source tarball, SRPM/RPM and RPM payload extraction (the Makefile's dist, rpm
# and rpm-payload targets).
#
#   rpm.sh version              the package version of HEAD
#   rpm.sh dist DISTDIR         DISTDIR/update-agent-VERSION.tar.gz
#   rpm.sh rpm DISTDIR [ARGS]   dist, then rpmbuild -ta; leaves the .src.rpm and
#                               the binary RPM(s) in DISTDIR. ARGS go to
#                               rpmbuild (e.g. --nocheck).
#   rpm.sh payload RPM DIR      unpack RPM's files under DIR (no scriptlets)
#
# RPM_VERSION, when set, is the package version instead (the guest e2e stamps
# each build with its own, to tell its binary from any other).
#
# The tarball holds the git-tracked files of the work tree (what `make build`
# would build) plus vendor/ made by `go mod vendor` in a temporary copy, so the
# RPM builds without network; the repository itself never carries vendor/.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
spec=$root/update-agent.spec
name=update-agent

die() { echo "rpm.sh: $*" >&2; exit 1; }

tmpdirs=()
trap 'rm -rf "${tmpdirs[@]}"' EXIT

# The spec's Version is the next release. HEAD tagged v<Version> builds that
# release; any other commit a snapshot that sorts before it (rpm's "~"),
# ordered by commit count.
pkg_version() {
	local base
	if [ -n "${RPM_VERSION:-}" ]; then
		# rpm's Version tag: no "-" (it separates the release), no spaces.
		[[ $RPM_VERSION =~ ^[0-9A-Za-z][0-9A-Za-z._+~^]*$ ]] ||
			die "RPM_VERSION=$RPM_VERSION is not an rpm version (letters, digits and ._+~^ only)"
		echo "$RPM_VERSION"
		return
	fi
	base=$(sed -n 's/^Version:[[:space:]]*//p' "$spec")
	[ -n "$base" ] || die "no Version: in $spec"
	if [ "$(git -C "$root" describe --tags --exact-match HEAD 2>/dev/null || true)" = "v$base" ]; then
		echo "$base"
	else
		echo "$base~$(git -C "$root" rev-list --count HEAD).g$(git -C "$root" rev-parse --short=7 HEAD)"
	fi
}

# cmd_dist DISTDIR: sets tarball.
cmd_dist() {
	local distdir=$1 version tmp src mtime
	version=$(pkg_version)
	mkdir -p "$distdir"
	distdir=$(cd "$distdir" && pwd)
	tmp=$(mktemp -d)
	tmpdirs+=("$tmp")
	src=$tmp/$name-$version
	mkdir -p "$src"
	# Tracked files as they are in the work tree; skip ones deleted there.
	(cd "$root" && git ls-files -z | while IFS= read -r -d '' f; do
		[ -e "$f" ] && printf '%s\0' "$f"
	done | tar --null -T - -cf - | tar -xf - -C "$src")
	[ ! -e "$src/vendor" ] || die "the repository must not carry vendor/"
	sed -i "s/^Version:.*/Version:        $version/" "$src/$name.spec"
	(cd "$src" && GOFLAGS= GOWORK=off go mod vendor)
	mtime=$(git -C "$root" log -1 --format=%ct)
	tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
		-C "$tmp" -cf - "$name-$version" | gzip -n >"$distdir/$name-$version.tar.gz"
	tarball=$distdir/$name-$version.tar.gz
	echo "$tarball"
}

cmd_rpm() {
	local distdir=$1 top
	shift
	command -v rpmbuild >/dev/null || die "rpmbuild not found (Debian: apt-get install rpm)"
	mkdir -p "$distdir"
	distdir=$(cd "$distdir" && pwd)
	cmd_dist "$distdir"
	top=$(mktemp -d)
	tmpdirs+=("$top")
	rpmbuild -ta "$tarball" --define "_topdir $top" "$@"
	# Only this build's packages stay, so DISTDIR/update-agent-*.rpm is unambiguous.
	rm -f "$distdir"/$name-*.rpm
	cp "$top"/SRPMS/*.src.rpm "$top"/RPMS/*/*.rpm "$distdir"/
	ls -1 "$distdir"/$name-*.rpm
}

cmd_payload() {
	local rpm=$1 dir=$2
	[ -f "$rpm" ] || die "no RPM at $rpm (make rpm builds one)"
	rpm=$(cd "$(dirname "$rpm")" && pwd)/$(basename "$rpm")
	mkdir -p "$dir"
	# Only the payload: the guest runs daemon-reload/enable itself.
	(cd "$dir" && rpm2cpio "$rpm" | cpio -idm --quiet --no-absolute-filenames)
}

case ${1:-} in
version) pkg_version ;;
dist) [ $# -eq 2 ] || die "usage: rpm.sh dist DISTDIR"; cmd_dist "$2" ;;
rpm) [ $# -ge 2 ] || die "usage: rpm.sh rpm DISTDIR [RPMBUILD-ARGS]"; shift; cmd_rpm "$@" ;;
payload) [ $# -eq 3 ] || die "usage: rpm.sh payload RPM DIR"; cmd_payload "$2" "$3" ;;
*) die "usage: rpm.sh version|dist|rpm|payload ..." ;;
esac
