package adapters

import (
	"context"
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
	return b.In.Read(ctx)
}
