package standin

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/update-agent/update-agent/agent/oplog"
)

// TestStatusFinalizationLocked: on a real sysroot, `status --json` gives the
// staged deployment "finalization-locked": true exactly while the legacy lock
// file exists, and no deployment the key otherwise, as upstream does
// (coreos/rpm-ostree rust/src/daemon.rs, "Staging status"). ostree is a
// script printing libostree 2022.7's `ostree admin status` (adminStatusOut).
func TestStatusFinalizationLocked(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-ostree")
	if err := os.WriteFile(filepath.Join(dir, "status.txt"), []byte(adminStatusOut), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\ncase \"$1\" in\n" +
		"admin) exec cat " + filepath.Join(dir, "status.txt") + " ;;\n" +
		"show) printf 'Date:  2024-02-10 13:24:18 +0000\\n' ;;\n" +
		"*) exit 1 ;;\nesac\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	store := &sysrootStore{ostree: ostreeCLI{bin: bin, runner: oplog.Runner{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}},
		lockDir: filepath.Join(dir, "run"), root: dir}
	d := &Daemon{cfg: Config{RunDir: filepath.Join(dir, "standin-run"), Sysroot: dir}, store: store}

	keys := func() map[string]bool { // role -> carries finalization-locked: true
		t.Helper()
		b, err := d.status()
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Deployments []map[string]any `json:"deployments"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, dep := range st.Deployments {
			v, ok := dep["finalization-locked"]
			if !ok {
				continue
			}
			if v != true {
				t.Errorf("finalization-locked = %v, want true or absent", v)
			}
			if dep["staged"] == true {
				got["staged"] = true
			} else {
				got["other"] = true
			}
		}
		return got
	}
	if got := keys(); len(got) != 0 {
		t.Errorf("no lock file: finalization-locked on %v, want absent", got)
	}
	if err := store.lock(t.Context(), Staged{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "run", "staged-deployment-locked")); err != nil {
		t.Fatalf("lock did not write the legacy lock file: %v", err)
	}
	if got := keys(); !got["staged"] || got["other"] {
		t.Errorf("lock file present: finalization-locked on %v, want the staged deployment only", got)
	}
	if err := store.unlock(t.Context(), Staged{}); err != nil {
		t.Fatal(err)
	}
	if got := keys(); len(got) != 0 {
		t.Errorf("lock file removed: finalization-locked on %v, want absent", got)
	}
}
