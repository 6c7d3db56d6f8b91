package guest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// bootEntry is a Boot Loader Specification entry as ostree writes it in
// /boot/loader/entries: the kernel, initramfs and command line of one
// deployment.
type bootEntry struct {
	name, linux, initrd, options string
	version                      int
}

// parseBootEntry reads the keys the launcher needs ("key value" lines).
func parseBootEntry(name, text string) (bootEntry, error) {
	e := bootEntry{name: name}
	for _, line := range strings.Split(text, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		v = strings.TrimSpace(v)
		switch k {
		case "linux":
			e.linux = v
		case "initrd":
			e.initrd = v
		case "options":
			e.options = v
		case "version":
			n, err := strconv.Atoi(v)
			if err != nil {
				return e, fmt.Errorf("boot entry %s: version %q: %w", name, v, err)
			}
			e.version = n
		}
	}
	if e.linux == "" || e.initrd == "" || e.options == "" {
		return e, fmt.Errorf("boot entry %s lacks linux, initrd or options:\n%s", name, text)
	}
	return e, nil
}

// defaultEntry is the entry a BLS bootloader boots by default: ostree
// numbers its entries so the first deployment (the default) has the highest
// version.
func defaultEntry(entries []bootEntry) (bootEntry, error) {
	if len(entries) == 0 {
		return bootEntry{}, fmt.Errorf("no boot entries")
	}
	best := entries[0]
	for _, e := range entries[1:] {
		if e.version > best.version {
			best = e
		}
	}
	return best, nil
}

// bootFSPath maps a path from an entry onto the /boot filesystem: entries
// written while /boot was part of the root (at image build) say
// /boot/ostree/..., entries written by the guest, where /boot is its own
// disk, say /ostree/....
func bootFSPath(p string) string {
	if rest, ok := strings.CutPrefix(p, "/boot/"); ok {
		return "/" + rest
	}
	return p
}

// debugfs runs one debugfs request against an ext4 image, read-only.
func debugfs(ctx context.Context, img, request string) (string, error) {
	cmd := exec.CommandContext(ctx, "debugfs", "-R", request, img)
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = strings.TrimSpace(string(ee.Stderr))
		}
		return "", fmt.Errorf("debugfs -R %q %s: %w: %s", request, img, err, stderr)
	}
	return string(out), nil
}

// readDefaultEntry reads the default boot entry from the /boot disk image
// (qemu is stopped: the image is consistent) and copies its kernel and
// initramfs into dir. debugfs reads the filesystem without mounting it and
// reports a missing file only on stderr, so the copies are checked.
func readDefaultEntry(ctx context.Context, bootImg, dir string) (e bootEntry, kernel, initrd string, err error) {
	ls, err := debugfs(ctx, bootImg, "ls -p /loader/entries")
	if err != nil {
		return e, "", "", err
	}
	var entries []bootEntry
	for _, line := range strings.Split(ls, "\n") {
		// -p: /inode/mode/uid/gid/name/size/
		f := strings.Split(strings.TrimSpace(line), "/")
		if len(f) < 7 || !strings.HasSuffix(f[5], ".conf") {
			continue
		}
		text, err := debugfs(ctx, bootImg, "cat /loader/entries/"+f[5])
		if err != nil {
			return e, "", "", err
		}
		be, err := parseBootEntry(f[5], text)
		if err != nil {
			return e, "", "", err
		}
		entries = append(entries, be)
	}
	if e, err = defaultEntry(entries); err != nil {
		return e, "", "", fmt.Errorf("reading %s /loader/entries: %w:\n%s", bootImg, err, ls)
	}
	kernel, initrd = filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd.img")
	for _, c := range [][2]string{{e.linux, kernel}, {e.initrd, initrd}} {
		_ = removeFile(c[1])
		if _, err := debugfs(ctx, bootImg, fmt.Sprintf("dump %s %s", bootFSPath(c[0]), c[1])); err != nil {
			return e, "", "", err
		}
		if !nonEmpty(c[1]) {
			return e, "", "", fmt.Errorf("boot entry %s: %s not found on %s", e.name, c[0], bootImg)
		}
	}
	return e, kernel, initrd, nil
}
