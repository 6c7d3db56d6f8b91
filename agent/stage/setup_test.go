package stage

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The write rate goes into the staging unit's io.max with the disks'
// numbers and the unit's cgroup looked up once (the rate changes up to
// once a second; each lookup was a D-Bus call and an open); once the
// unit's cgroup is gone, there is nothing to pace until it runs again.
func TestRateWriterLooksUpOnce(t *testing.T) {
	root := t.TempDir()
	sys := newFakeSystemd(t.TempDir())
	sys.unit(stagingUnit).active = "active"
	writeCgroup(t, root, stagingUnit, 10*mib, 8*mib)
	dev := filepath.Join(root, "block/vdb/dev")
	os.MkdirAll(filepath.Dir(dev), 0o755)
	os.WriteFile(dev, []byte("252:16\n"), 0o644)
	s := &Stager{o: Options{StagingUnit: stagingUnit, SysRoot: root}, d: Deps{Systemd: sys}}
	w := &rateWriter{s: s, disks: []string{"vdb"}}
	ioMax := filepath.Join(root, "fs/cgroup/system.slice", stagingUnit, "io.max")
	for i, rate := range []uint64{4_000_000, 2_000_000, 3_000_000} {
		if err := w.set(context.Background(), rate); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			os.Remove(dev) // read once: later rates do without it
		}
		// IOPS paced with the rate, at 16 KiB a request by default.
		want := map[uint64]string{4_000_000: "252:16 wbps=4000000 wiops=244", 2_000_000: "252:16 wbps=2000000 wiops=122", 3_000_000: "252:16 wbps=3000000 wiops=183"}[rate]
		if b, _ := os.ReadFile(ioMax); string(b) != want {
			t.Errorf("io.max %q, want %q", b, want)
		}
	}
	if n := sys.lookups[stagingUnit]; n != 1 {
		t.Errorf("%d cgroup lookups for 3 rates, want 1", n)
	}
	// The unit stopped, its cgroup gone: nothing to pace, and no error.
	os.RemoveAll(filepath.Dir(ioMax))
	sys.unit(stagingUnit).active = "inactive"
	for range 2 {
		if err := w.set(context.Background(), 1_000_000); err != nil {
			t.Errorf("a stopped unit: %v", err)
		}
	}
	if n := sys.lookups[stagingUnit]; n != 2 {
		t.Errorf("%d cgroup lookups, want 2 (looked up again after the write failed, then not running)", n)
	}
}
