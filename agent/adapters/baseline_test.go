package adapters

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A member the kubelet runs (etcd.local_process): the baseline reads its
// cgroup's io.pressure, and finds the cgroup again once the container
// restarted into another one.
func TestBaselineFindsTheProcessCgroup(t *testing.T) {
	root := t.TempDir()
	psi := func(cg, total string) {
		dir := filepath.Join(root, cg)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		body := "some avg10=0.00 avg60=0.00 avg300=0.00 total=" + total + "\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=50\n"
		if err := os.WriteFile(filepath.Join(dir, "io.pressure"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cg := "/kubepods.slice/crio-a.scope"
	psi(cg, "1500")
	finds := 0
	b := &BaselineInputs{CgroupRoot: root, FindCgroup: func() (string, error) { finds++; return cg, nil }}
	for i := 0; i < 2; i++ {
		r, err := b.Read(context.Background())
		if err != nil || r.Pressure == nil || r.Pressure.SomeTotal != 1500*time.Microsecond {
			t.Fatalf("read %d: %+v, %v; want the pod's pressure", i, r.Pressure, err)
		}
	}
	if finds != 1 {
		t.Errorf("looked for the cgroup %d times while it stayed; want once", finds)
	}
	// The container restarted: the old cgroup is gone.
	if err := os.RemoveAll(filepath.Join(root, "/kubepods.slice/crio-a.scope")); err != nil {
		t.Fatal(err)
	}
	cg = "/kubepods.slice/crio-b.scope"
	psi(cg, "7000")
	if r, err := b.Read(context.Background()); err != nil || r.Pressure == nil || r.Pressure.SomeTotal != 7000*time.Microsecond {
		t.Fatalf("after the restart: %+v, %v; want the new cgroup's pressure", r.Pressure, err)
	}
}
