package guest

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

//go:embed build-image.sh
var buildScript []byte

//go:embed build-ostree-image.sh
var buildOstreeScript []byte

//go:embed guest-tree.sh
var guestTreeLib []byte

//go:embed packages.txt
var packageList []byte

//go:embed packages-ostree.txt
var ostreePackageList []byte

//go:embed xfs-protofile.sh
var xfsProtofileScript []byte

// image is a built guest image in the cache. kernel and initrd are empty
// for the ostree image: the default boot entry on boot says which.
type image struct {
	dir, kernel, initrd, root, boot, key, knownHosts string
}

// ensureImage runs build-image.sh (or build-ostree-image.sh with the root
// filesystem rootFS), which reuses the cached image when its inputs did not
// change. The scripts are embedded so the helper does not depend on the
// test's working directory.
func ensureImage(ctx context.Context, log io.Writer, ostree bool, rootFS string) (image, error) {
	tmp, err := os.MkdirTemp("", "ua-guest-build-")
	if err != nil {
		return image{}, err
	}
	defer os.RemoveAll(tmp)
	files := map[string][]byte{"build-image.sh": buildScript, "guest-tree.sh": guestTreeLib, "packages.txt": packageList}
	name := "build-image.sh"
	if ostree {
		files["build-ostree-image.sh"] = buildOstreeScript
		files["packages-ostree.txt"] = ostreePackageList
		files["xfs-protofile.sh"] = xfsProtofileScript
		name = "build-ostree-image.sh"
	}
	for f, b := range files {
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o755); err != nil {
			return image{}, err
		}
	}
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(tmp, name))
	cmd.Env = append(os.Environ(), "UA_GUEST_ROOT_FS="+rootFS)
	cmd.Stdout = &stdout
	cmd.Stderr = log
	if err := cmd.Run(); err != nil {
		return image{}, fmt.Errorf("building the guest image (tests/guest/%s): %w", name, err)
	}
	dir := lastLine(stdout.String())
	img := image{
		dir:        dir,
		root:       filepath.Join(dir, "root.img"),
		key:        filepath.Join(dir, "id_ed25519"),
		knownHosts: filepath.Join(dir, "known_hosts"),
	}
	need := []string{img.root, img.key, img.knownHosts}
	if ostree {
		img.boot = filepath.Join(dir, "boot.img")
		need = append(need, img.boot)
	} else {
		img.kernel, img.initrd = filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd.img")
		need = append(need, img.kernel, img.initrd)
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			return image{}, fmt.Errorf("guest image %q is incomplete: %w", dir, err)
		}
	}
	return img, nil
}

func removeFile(p string) error { return os.Remove(p) }

func nonEmpty(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Size() > 0
}
