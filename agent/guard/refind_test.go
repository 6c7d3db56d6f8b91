package guard

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// A static pod's container restarted: its cgroup is gone and a new one
// holds etcd. The reading finds it (through FindPressureFiles), and while
// etcd runs nowhere, asks again only every RefindEvery.
func TestInputsFindPressureFilesAgain(t *testing.T) {
	dir := t.TempDir()
	psi := func(cg string) (string, string) {
		return filepath.Join(dir, cg, "io.pressure"), filepath.Join(dir, cg, "cpu.pressure")
	}
	newIO, newCPU := psi("crio-new.scope")
	if err := os.MkdirAll(filepath.Dir(newIO), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{newIO, newCPU} {
		if err := os.WriteFile(f, []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=2000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	oldIO, oldCPU := psi("crio-old.scope") // removed with its container
	clk := clockwork.NewFakeClock()
	var asked int
	var found error
	in := &Inputs{PressureFile: oldIO, CPUPressureFile: oldCPU, Clock: clk,
		FindPressureFiles: func() (string, string, error) {
			asked++
			if found != nil {
				return "", "", found
			}
			return newIO, newCPU, nil
		}}
	defer in.Close()

	r, err := in.Read(context.Background())
	if err != nil || r.Pressure == nil || r.Pressure.SomeTotal != 2*time.Millisecond || r.CPUPressure == nil {
		t.Fatalf("after the restart: %+v, %v; want both files of the new cgroup read", r, err)
	}
	if asked != 1 {
		t.Errorf("asked %d times, want 1", asked)
	}

	// The new container stops too, and etcd runs nowhere for a while.
	if err := os.RemoveAll(filepath.Join(dir, "crio-new.scope")); err != nil {
		t.Fatal(err)
	}
	in.Close() // the kept descriptors would still read a removed regular file
	found = errors.New(`no process named "etcd" runs`)
	clk.Advance(RefindEvery)
	for i := 0; i < 5; i++ {
		if r, err := in.Read(context.Background()); err == nil || r.Pressure != nil {
			t.Fatalf("read %d with etcd nowhere: %+v, %v; want the error", i, r, err)
		}
		clk.Advance(time.Second)
	}
	if asked != 2 {
		t.Errorf("asked %d times within %v, want 2 (once at the first failure, then every %v)", asked, RefindEvery, RefindEvery)
	}
	clk.Advance(RefindEvery)
	if _, err := in.Read(context.Background()); err == nil || asked != 3 {
		t.Errorf("after %v more: asked %d times, err %v; want 3 and the error", RefindEvery, asked, err)
	}
}
