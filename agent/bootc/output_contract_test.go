package bootc_test

import (
	"strings"
	"testing"

	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// TestStandinOutputAsUpstream: the bootc stand-in spells --format's values
// as clap derives them from OutputFormat (bootc-dev/bootc
// crates/lib/src/cli.rs, rename_all = "lowercase") and names the image in
// upgrade --check as cli.rs prints "{ostree_imgref:#}": "docker://NAME"
// for an unverified registry image.
func TestStandinOutputAsUpstream(t *testing.T) {
	t.Parallel()
	e := standintest.New(t, bins)
	bootcCLI := func(args ...string) (string, string, int) { return e.Bootc(nil, args...) }
	if _, stderr, code := bootcCLI("status", "--format", "humanReadable"); code != 2 || !strings.Contains(stderr, "invalid value 'humanReadable'") {
		t.Errorf("--format humanReadable: exit %d, %q; want clap's refusal", code, stderr)
	}
	if _, stderr, _ := bootcCLI("status", "--format", "humanreadable"); strings.Contains(stderr, "invalid value") {
		t.Errorf("--format humanreadable refused as a value: %q", stderr)
	}
	img := "docker://" + e.Remote + "/" + e.Ref
	if out, _, code := bootcCLI("upgrade", "--check"); code != 0 || out != "No changes in: "+img+"\n" {
		t.Errorf("upgrade --check with nothing new: exit %d, %q", code, out)
	}
	e.Publish(e.Ref, 1)
	out, _, code := bootcCLI("upgrade", "--check")
	lines := strings.Split(out, "\n")
	if code != 0 || lines[0] != "Update available for: "+img || !strings.HasPrefix(out[len(lines[0])+1:], "  Version: 1.1\n  Digest: sha256:") ||
		!strings.Contains(out, "\nTotal new layers: 1     Size: 0 bytes\nRemoved layers:   1     Size: 0 bytes\nAdded layers:     1     Size: 0 bytes\n") {
		t.Errorf("upgrade --check: exit %d\n%s", code, out)
	}
}
