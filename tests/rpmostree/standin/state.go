package standin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Dep is one deployment as the stand-in records it.
type Dep struct {
	OSName   string `json:"osname"`
	Checksum string `json:"checksum"`
	Serial   int    `json:"serial"`
	Origin   string `json:"origin"` // refspec "remote:ref"
	// Image is the container image reference followed, when the origin
	// is an image; Origin is then the ref backing it (container.go).
	Image string `json:"image,omitempty"`
	// Layered are the layered packages, name to EVR (layered.go).
	Layered   map[string]string `json:"layered,omitempty"`
	Version   string            `json:"version,omitempty"`
	Timestamp uint64            `json:"timestamp"`
	Pinned    bool              `json:"pinned,omitempty"`
}

// ID is rpm-ostree's deployment id: osname-checksum.serial.
func (d Dep) ID() string { return fmt.Sprintf("%s-%s.%d", d.OSName, d.Checksum, d.Serial) }

func (d Dep) dirName() string { return d.Checksum + "." + strconv.Itoa(d.Serial) }

// Deployments is what survives a reboot: recorded under the sysroot.
type Deployments struct {
	Booted   Dep  `json:"booted"`
	Rollback *Dep `json:"rollback,omitempty"`
}

// Staged is the staged deployment and its finalization lock, kept in the run
// dir so that a reboot without finalization loses it.
type Staged struct {
	Deployment Dep  `json:"deployment"`
	Locked     bool `json:"locked"`
}

// Driver is the registered update driver (rpm-ostree's update-driver.gv).
type Driver struct {
	Name string `json:"driver-name"`
	Unit string `json:"driver-sd-unit"`
}

func readJSON(path string, v any) (bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("parsing %s: %w", path, err)
	}
	return true, nil
}

// writeJSON replaces path atomically and durably: a crash leaves the old or
// the new state, never a torn file.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func (c Config) loadDeployments() (Deployments, error) {
	var d Deployments
	ok, err := readJSON(c.deploymentsFile(), &d)
	if err == nil && !ok {
		err = fmt.Errorf("%s missing: sysroot not initialized (run `rpm-ostree standin-init`)", c.deploymentsFile())
	}
	return d, err
}

func (c Config) loadStaged() (*Staged, error) {
	var s Staged
	ok, err := readJSON(c.stagedFile(), &s)
	if err != nil || !ok {
		return nil, err
	}
	return &s, nil
}

func (c Config) loadDriver() (*Driver, error) {
	var d Driver
	ok, err := readJSON(c.driverFile(), &d)
	if err != nil || !ok {
		return nil, err
	}
	return &d, nil
}

// nextSerial is ostree's deployserial: one more than any existing
// deployment of the same commit.
func nextSerial(csum string, existing ...*Dep) int {
	s := 0
	for _, d := range existing {
		if d != nil && d.Checksum == csum && d.Serial >= s {
			s = d.Serial + 1
		}
	}
	return s
}

// removeOrphans deletes checkouts that no deployment refers to: what a
// staged deployment leaves behind when a reboot skipped its finalization.
func (c Config) removeOrphans(keep ...*Dep) error {
	want := map[string]bool{}
	osnames := map[string]bool{}
	for _, d := range keep {
		if d != nil {
			want[c.checkoutDir(*d)] = true
			osnames[d.OSName] = true
		}
	}
	for os_ := range osnames {
		ents, err := os.ReadDir(c.deployDir(os_))
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := filepath.Join(c.deployDir(os_), e.Name())
			if !want[p] && (e.IsDir() || strings.HasPrefix(e.Name(), ".tmp-")) {
				if err := removeTree(p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// removeTree removes a checkout; ostree checkouts can hold read-only dirs.
func removeTree(p string) error {
	_ = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o755)
		}
		return nil
	})
	return os.RemoveAll(p)
}
