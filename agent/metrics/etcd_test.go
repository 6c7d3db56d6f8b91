package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	// Registers etcd's WAL metrics in the default registry (its init), as
	// the etcd server the agent runs beside does: the example rules are
	// checked against etcd's own names, not a copy of them.
	_ "go.etcd.io/etcd/server/v3/storage/wal"
)

// etcdMetrics are the metric families etcd's WAL package registers (the
// default registry: the agent's own never holds them).
func etcdMetrics(t *testing.T) map[string]bool {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	if !have["etcd_disk_wal_fsync_duration_seconds"] {
		t.Fatalf("etcd's WAL fsync histogram is not registered: %d families", len(mfs))
	}
	return have
}
