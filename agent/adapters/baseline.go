package adapters

import (
	"context"
	"os"
	"path/filepath"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/systemd"
)

// BaselineInputs is the rolling latency baseline's source (guard.Source):
// etcd's metrics and, once the unit's cgroup is known, its io.pressure.
// The cgroup is looked up lazily: etcd may start after the agent.
type BaselineInputs struct {
	In guard.Inputs
	// Unit is etcd's unit ("" none); CgroupRoot is where the cgroup
	// hierarchy is mounted (/sys/fs/cgroup, under --root in tests).
	Unit       string
	CgroupRoot string
	// FindCgroup, where Unit is "", finds etcd's cgroup (relative to
	// CgroupRoot) another way: etcd.local_process. nil: none.
	FindCgroup func() (string, error)
}

// Read reads one observation.
func (b *BaselineInputs) Read(ctx context.Context) (guard.Reading, error) {
	if b.Unit != "" && b.In.PressureFile == "" {
		if conn, err := systemd.Dial(ctx); err == nil {
			st, err := conn.Status(ctx, b.Unit)
			conn.Close()
			if err == nil && st.ControlGroup != "" {
				b.In.PressureFile = filepath.Join(b.CgroupRoot, st.ControlGroup, "io.pressure")
			}
		}
	}
	if b.Unit == "" && b.FindCgroup != nil {
		// A static pod's cgroup goes with its container: found again once
		// the kept one is gone.
		if _, err := os.Stat(b.In.PressureFile); b.In.PressureFile == "" || err != nil {
			b.In.PressureFile = ""
			if cg, err := b.FindCgroup(); err == nil {
				b.In.PressureFile = filepath.Join(b.CgroupRoot, cg, "io.pressure")
			}
		}
	}
	return b.In.Read(ctx)
}
