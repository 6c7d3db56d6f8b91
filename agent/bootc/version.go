package bootc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Version is a bootc release, major.minor.patch.
type Version struct{ Major, Minor, Patch int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Less orders versions.
func (v Version) Less(o Version) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Patch < o.Patch
}

// MinVersion is the first bootc with `upgrade --download-only` and
// `upgrade --from-downloaded` (bootc 1.12.0): without them an unplanned
// reboot would apply a staged update, which the agent must never allow.
var MinVersion = Version{1, 12, 0}

// ErrTooOld: the installed bootc cannot stage finalization-locked.
var ErrTooOld = errors.New("bootc too old for upgrade --download-only")

// ParseVersion reads `bootc --version` ("bootc 1.12.0"; a distribution
// suffix such as "1.12.0-1.fc43" is ignored).
func ParseVersion(out string) (Version, error) {
	f := strings.Fields(strings.TrimSpace(out))
	if len(f) < 2 || f[0] != "bootc" {
		return Version{}, fmt.Errorf("unexpected bootc --version output %q", strings.TrimSpace(out))
	}
	s, _, _ := strings.Cut(f[1], "-")
	s, _, _ = strings.Cut(s, "+")
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Version{}, fmt.Errorf("unexpected bootc version %q", f[1])
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return Version{}, fmt.Errorf("unexpected bootc version %q", f[1])
		}
		n[i] = v
	}
	return Version{n[0], n[1], n[2]}, nil
}

// RequireDownloadOnly refuses a bootc older than MinVersion, saying what is
// needed.
func RequireDownloadOnly(v Version) error {
	if v.Less(MinVersion) {
		return fmt.Errorf("%w: bootc %s is installed, the agent needs bootc >= %s (upgrade --download-only and --from-downloaded keep a staged update from being applied by an unplanned reboot); update bootc or use updates.backend = \"rpm-ostree\"",
			ErrTooOld, v, MinVersion)
	}
	return nil
}
