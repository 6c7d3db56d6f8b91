package iocost

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeFS is a temp-dir cgroupfs and sysfs: the io.cost files hold the
// last line written, as a one-disk kernel's would read back.
type fakeFS struct {
	c    Controller
	boot string
}

func newFake(t *testing.T, qos, model string) *fakeFS {
	t.Helper()
	dir := t.TempDir()
	f := &fakeFS{boot: filepath.Join(dir, "boot_id")}
	f.c = Controller{CgroupRoot: filepath.Join(dir, "cgroup"), SysRoot: filepath.Join(dir, "sys"),
		StateFile: filepath.Join(dir, "state", "iocost.json"), BootIDPath: f.boot}
	mustWrite(t, f.boot, "boot-1\n")
	mustWrite(t, filepath.Join(f.c.SysRoot, "block", "vda", "dev"), "253:0\n")
	if qos != "-" {
		mustWrite(t, f.c.qosFile(), qos)
		mustWrite(t, f.c.modelFile(), model)
	}
	return f
}

func mustWrite(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// plansFor is one plan a disk: the same QoS, the model where models has
// one (the operator's), else the model in force.
func plansFor(disks []string, q QoS, models map[string]Model) []DiskPlan {
	var out []DiskPlan
	for _, d := range disks {
		p := DiskPlan{Disk: d, QoS: q}
		if m, ok := models[d]; ok {
			p.Model, p.Source = &m, Configured
		}
		out = append(out, p)
	}
	return out
}

var window = QoS{Enable: true, User: true, RPct: 95, RLat: 20000, WPct: 95, WLat: 20000, Min: 5, Max: 150}

func TestApplyThenRestore(t *testing.T) {
	cases := []struct {
		name, qos, model     string
		models               map[string]Model
		wantModel            string // in force during the window
		restoreQoS, restoreM string
	}{
		{"never set up, kernel's model", "", "", nil, "",
			"253:0 enable=0 ctrl=auto", "253:0 ctrl=auto"},
		{"an operator's model for the window, the auto one back after",
			"253:0 enable=0 ctrl=auto rpct=0.00 rlat=250000 wpct=0.00 wlat=250000 min=1.00 max=10000.00\n",
			"253:0 ctrl=auto model=linear rbps=1 rseqiops=2 rrandiops=3 wbps=4 wseqiops=5 wrandiops=6\n",
			map[string]Model{"vda": {User: true, RBps: 20e6, RSeqIOPS: 500, RRandIOPS: 500, WBps: 20e6, WSeqIOPS: 500, WRandIOPS: 500}},
			"253:0 ctrl=user model=linear rbps=20000000 rseqiops=500 rrandiops=500 wbps=20000000 wseqiops=500 wrandiops=500",
			"253:0 enable=0 ctrl=auto", "253:0 ctrl=auto"},
		{"settings made outside the agent come back as they were",
			"253:0 enable=1 ctrl=user rpct=99.00 rlat=5000 wpct=99.00 wlat=5000 min=50.00 max=100.00\n",
			"253:0 ctrl=user model=linear rbps=9 rseqiops=9 rrandiops=9 wbps=9 wseqiops=9 wrandiops=9\n", nil,
			"253:0 ctrl=user model=linear rbps=9 rseqiops=9 rrandiops=9 wbps=9 wseqiops=9 wrandiops=9\n",
			"253:0 enable=1 ctrl=user rpct=99.00 rlat=5000 wpct=99.00 wlat=5000 min=50.00 max=100.00",
			"253:0 ctrl=user model=linear rbps=9 rseqiops=9 rrandiops=9 wbps=9 wseqiops=9 wrandiops=9"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, c.qos, c.model)
			var journal bytes.Buffer
			f.c.Log = slog.New(slog.NewTextHandler(&journal, nil))
			if err := f.c.Apply(plansFor([]string{"vda"}, window, c.models)); err != nil {
				t.Fatal(err)
			}
			// The journal names the model's source, by its config key.
			source := `model_source="the model in force`
			if c.models != nil {
				source = `model_source="configured (staging.iocost_models)"`
			}
			if !strings.Contains(journal.String(), source) {
				t.Errorf("journal lacks %s:\n%s", source, journal.String())
			}
			if got := read(t, f.c.qosFile()); got != window.Line("253:0") {
				t.Errorf("io.cost.qos in the window %q", got)
			}
			if got := read(t, f.c.modelFile()); got != c.wantModel {
				t.Errorf("io.cost.model in the window %q, want %q", got, c.wantModel)
			}
			if _, err := os.Stat(f.c.StateFile); err != nil {
				t.Fatalf("no record in the window: %v", err)
			}
			// A second Apply (a restart that stages again before
			// restoring) must not record the window's lines as originals.
			if err := f.c.Apply(plansFor([]string{"vda"}, window, c.models)); err != nil {
				t.Fatal(err)
			}
			// A new Controller: the record alone carries the originals,
			// as after a SIGKILL.
			again := Controller{CgroupRoot: f.c.CgroupRoot, SysRoot: f.c.SysRoot, StateFile: f.c.StateFile, BootIDPath: f.boot}
			if err := again.Restore(); err != nil {
				t.Fatal(err)
			}
			if got := read(t, f.c.qosFile()); got != c.restoreQoS {
				t.Errorf("io.cost.qos restored %q, want %q", got, c.restoreQoS)
			}
			if got := read(t, f.c.modelFile()); got != c.restoreM {
				t.Errorf("io.cost.model restored %q, want %q", got, c.restoreM)
			}
			if _, err := os.Stat(f.c.StateFile); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("record left after restoring: %v", err)
			}
		})
	}
}

func TestUnavailable(t *testing.T) {
	f := newFake(t, "-", "")
	if err := f.c.Available(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Available = %v, want ErrUnavailable", err)
	}
	if err := f.c.Apply(plansFor([]string{"vda"}, window, nil)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Apply = %v, want ErrUnavailable", err)
	}
	if _, err := os.Stat(f.c.StateFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a record was written without iocost: %v", err)
	}
	if err := f.c.Restore(); err != nil {
		t.Errorf("Restore with nothing recorded: %v", err)
	}
}

// TestRestoreEarlierBoot: a record of an earlier boot is dropped, not
// written: the reboot reset the controller, and the current settings
// (perhaps an operator's) must stay.
func TestRestoreEarlierBoot(t *testing.T) {
	f := newFake(t, "", "")
	if err := f.c.Apply(plansFor([]string{"vda"}, window, nil)); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, f.boot, "boot-2\n")
	mustWrite(t, f.c.qosFile(), "253:0 enable=1 ctrl=auto")
	if err := f.c.Restore(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, f.c.qosFile()); got != "253:0 enable=1 ctrl=auto" {
		t.Errorf("an earlier boot's record was restored: %q", got)
	}
	if _, err := os.Stat(f.c.StateFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record left: %v", err)
	}
}

// TestRestoreDiskGone: a disk that is gone is skipped; the record goes.
func TestRestoreDiskGone(t *testing.T) {
	f := newFake(t, "", "")
	if err := f.c.Apply(plansFor([]string{"vda"}, window, nil)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(f.c.SysRoot, "block", "vda")); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Restore(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f.c.StateFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record left: %v", err)
	}
}

// TestRestoreFailureKeepsRecord: a write the kernel refuses leaves the
// record for the next try.
func TestRestoreFailureKeepsRecord(t *testing.T) {
	f := newFake(t, "", "")
	if err := f.c.Apply(plansFor([]string{"vda"}, window, nil)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f.c.modelFile()); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Restore(); err == nil {
		t.Fatal("Restore succeeded with io.cost.model gone")
	}
	if _, err := os.Stat(f.c.StateFile); err != nil {
		t.Errorf("record removed after a failed restore: %v", err)
	}
}
