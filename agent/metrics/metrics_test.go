package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/update-agent/update-agent/agent/state"
)

func TestOwnRegistry(t *testing.T) {
	m := New("1.2.3")
	// Registering our collectors in the default registry would collide with
	// nothing; the point is that New never touches it.
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), ns+"_") {
			t.Errorf("%s registered in the default registry", mf.GetName())
		}
	}
	m.SetPhase(state.Staged)
	m.SetPhase(state.WaitingSlot)
	if v := value(t, m, "update_agent_state", "waiting_slot"); v != 1 {
		t.Errorf("waiting_slot = %v", v)
	}
	if v := value(t, m, "update_agent_state", "staged"); v != 0 {
		t.Errorf("staged = %v after leaving it", v)
	}
	m.Failed("hooks")
	m.Failed("hooks")
	if v := value(t, m, "update_agent_failures_total", "hooks"); v != 2 {
		t.Errorf("hooks failures = %v", v)
	}
	m.Frozen(1500 * time.Millisecond)
	m.GuardDecisions("freeze", 3)
	m.LeaderMoved()
	m.LockWaited(3 * time.Second)
	m.StagingDone(10*time.Minute, errors.New("x"))
	if v := value(t, m, "update_agent_staging_frozen_seconds_total", ""); v != 1.5 {
		t.Errorf("frozen = %v", v)
	}
}

func TestServeOverUnixSocket(t *testing.T) {
	m := New("1.2.3")
	m.SetPhase(state.Idle)
	sock := filepath.Join(t.TempDir(), "metrics.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln) }()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://x/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`update_agent_state{state="idle"} 1`, `update_agent_build_info{version="1.2.3"} 1`, "update_agent_lock_wait_seconds_bucket", "go_goroutines"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(string(b), "etcd_") {
		t.Error("etcd's metrics leaked into the agent's registry")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// value reads one gauge or counter from the registry; label is the value of
// its only label ("" for none).
func value(t *testing.T, m *Metrics, name, label string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, x := range mf.GetMetric() {
			if l := x.GetLabel(); (label == "" && len(l) == 0) || (len(l) == 1 && l[0].GetValue() == label) {
				if g := x.GetGauge(); g != nil {
					return g.GetValue()
				}
				return x.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

func TestFleetLockRequests(t *testing.T) {
	m := New("1.2.3")
	m.FleetLockRequest("pre-reboot", "failed_lock_semaphore_full")
	m.FleetLockRequest("pre-reboot", "failed_lock_semaphore_full")
	m.FleetLockRequest("steady-state", "ok")
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "update_agent_fleetlock_requests_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var labels []string
			for _, l := range mt.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[strings.Join(labels, ",")] = mt.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"endpoint=pre-reboot,kind=failed_lock_semaphore_full": 2, "endpoint=steady-state,kind=ok": 1}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// The pacing gauge carries the last window's pacing only.
func TestPaced(t *testing.T) {
	m := New("test")
	series := func() map[string]float64 {
		out := map[string]float64{}
		mfs, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "update_agent_staging_pacing" {
				continue
			}
			for _, mt := range mf.GetMetric() {
				var l []string
				for _, lp := range mt.GetLabel() {
					l = append(l, lp.GetName()+"="+lp.GetValue())
				}
				out[strings.Join(l, ",")] = mt.GetGauge().GetValue()
			}
		}
		return out
	}
	m.Paced("iocost (vda learned, vdb seed)")
	m.Paced("") // no window: nothing changes
	if got := series(); len(got) != 1 || got["mode=iocost,models=vda learned, vdb seed"] != 1 {
		t.Errorf("after an iocost window: %v", got)
	}
	m.Paced("write rate loop")
	if got := series(); len(got) != 1 || got["mode=write_rate_loop,models="] != 1 {
		t.Errorf("after a rate loop window: %v", got)
	}
}
