sticky=$2
[ -d "$1" ] || die "$1 is not a directory"
# Absolute: mkfs.xfs opens the sources from wherever it runs.
root=$(cd "$1" && pwd -P)
#!/usr/bin/env bash
# xfs-protofile.sh DIR STICKY >PROTOFILE
#
# Writes a mkfs.xfs protofile (`mkfs.xfs -p PROTOFILE`, see "-p protofile" in
# mkfs.xfs(8)) that recreates the tree under DIR: xfsprogs 6.1 has no
# `mkfs.xfs -d DIR` like mkfs.ext4's, and the build has no loop mounts.
# Each entry is `name mode uid gid [source|target]`, a directory's entries
# follow it and `$` ends it; mode is the type, setuid, setgid and three
# octal digits (`d--755`, `-u-755`, `l--777`).
#
# What the format cannot carry:
#  - names with whitespace (entries are whitespace-separated tokens), a
#    leading ':' (starts a comment) or the name '$' (ends a directory), and
#    symlink targets with whitespace or a leading ':': the script fails,
#    naming them, rather than dropping them;
#  - sockets and device nodes: the script fails (FIFOs are fine);
#  - the sticky bit: such paths go to STICKY as `PATH MODE` lines (MODE as
#    xfs_db's `write core.mode` takes it) for the caller to set afterwards;
#  - hard links: every link becomes a copy of its own;
#  - extended attributes, inode flags (chattr) and timestamps: dropped.
set -euo pipefail

die() { echo "xfs-protofile.sh: $1" >&2; [ -z "${2:-}" ] || printf '  %s\n' "$2" >&2; exit 1; }
[ $# -eq 2 ] || die "usage: xfs-protofile.sh DIR STICKY >PROTOFILE"
sticky=$2
[ -d "$1" ] || die "$1 is not a directory"
# Absolute: mkfs.xfs opens the sources from wherever it runs.
root=$(cd "$1" && pwd -P)
# The source paths of regular files are tokens too.
case $root in *[[:space:]]* | :*) die "cannot carry the path $root (whitespace or a leading ':')" ;; esac

bad=$(find "$root" -mindepth 1 \( -name '*[[:space:]]*' -o -name ':*' -o -name '$' \
  -o -lname '*[[:space:]]*' -o -lname ':*' \) -print | head -20)
[ -z "$bad" ] || die "names or symlink targets a protofile cannot carry (whitespace, a leading ':', '\$'):" "$bad"
bad=$(find "$root" \( -type s -o -type b -o -type c \) -print | head -20)
[ -z "$bad" ] || die "sockets or device nodes (not carried):" "$bad"

# find's default order is pre-order: a directory, then everything under it.
# With whitespace ruled out above, the fields split on spaces safely; %l
# (the symlink target) is empty but for symlinks.
{
  find "$root" -maxdepth 0 -printf '0 d %m %U %G . .\n'
  find "$root" -mindepth 1 -printf '%d %y %m %U %G %f %p %l\n'
} | awk -v root="$root" -v sticky="$sticky" '
  # mode TYPE OCTAL PATH -> the protofile mode string; records sticky paths.
  function mode(type, m, path,   s) {
    m = substr("0000" m, length(m) + 1)   # 4 digits: special bits, then rwx
    s = substr(m, 1, 1) + 0
    if (s % 2 == 1)                       # S_IFDIR is 040000, S_IFREG 0100000
      printf "%s %s%s\n", path, (type == "d" ? "04" : "010"), m >sticky
    return (type == "f" ? "-" : type) (s >= 4 ? "u" : "-") (s % 4 >= 2 ? "g" : "-") substr(m, 2)
  }
  function indent(depth,   s) { s = ""; while (--depth > 0) s = s "  "; return s }
  BEGIN { printf "" >sticky; print "ua-guest"; print "0 0" }
  $1 == 0 { print mode("d", $3, "/") " " $4 " " $5; next }
  {
    depth = $1 + 0; type = $2
    while (open >= depth) { print indent(open + 1) "$"; open-- }
    line = indent(depth) $6 " " mode(type, $3, substr($7, length(root) + 1)) " " $4 " " $5
    if (type == "d") { print line; open = depth }
    else if (type == "f") print line " " $7
    else if (type == "l") print line " " $8
    else if (type == "p") print line
    else { print "xfs-protofile.sh: " $7 ": file type " type " not carried" >"/dev/stderr"; failed = 1; exit 1 }
  }
  END { if (failed) exit 1; while (open > 0) { print indent(open + 1) "$"; open-- }; print "$" }
'
