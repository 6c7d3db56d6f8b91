package stage

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
)

// etcd's metrics are scraped every MetricsEvery, never faster than the
// guard reads, and every 3 s (the config's default) when unset.
func TestGuardMetricsEvery(t *testing.T) {
	for _, c := range []struct {
		every, interval, want time.Duration
	}{
		{0, 250 * time.Millisecond, 3 * time.Second},
		{3 * time.Second, 250 * time.Millisecond, 3 * time.Second},
		{500 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond},
		{500 * time.Millisecond, 2 * time.Second, 2 * time.Second},
	} {
		g := GuardOptions{MetricsEvery: c.every, Options: guard.Options{Interval: c.interval}}
		if got := g.metricsEvery(); got != c.want {
			t.Errorf("MetricsEvery %v, interval %v: %v, want %v", c.every, c.interval, got, c.want)
		}
	}
}

// The guard watches etcd's own cgroup's pressure where its unit, or (for a
// member the kubelet runs) its process, says which cgroup; the host-wide
// file where configured; nothing, said in the journal, where the cgroup is
// not found.
func TestPressureFiles(t *testing.T) {
	sys := newFakeSystemd(t.TempDir())
	sys.unit("etcd.service").active = "active"
	const pod = "/kubepods.slice/kubepods-burstable.slice/crio-abc.scope"
	found := func() (string, error) { return pod, nil }
	lost := func() (string, error) { return "", errors.New(`no process named "etcd" runs`) }
	for _, c := range []struct {
		name        string
		g           GuardOptions
		psi, cpu    string
		own         bool
		logContains string
	}{
		{name: "host-wide file", g: GuardOptions{PressureFile: "/proc/pressure/io", PressureCgroup: found}, psi: "/proc/pressure/io"},
		{name: "etcd's unit", g: GuardOptions{PressureUnit: "etcd.service"},
			psi: "/sys/fs/cgroup/system.slice/etcd.service/io.pressure", cpu: "/sys/fs/cgroup/system.slice/etcd.service/cpu.pressure", own: true},
		{name: "etcd's unit not running", g: GuardOptions{PressureUnit: "etcd-gone.service"}, logContains: "no cgroup for the unit"},
		{name: "etcd's process", g: GuardOptions{PressureCgroup: found},
			psi: "/sys/fs/cgroup" + pod + "/io.pressure", cpu: "/sys/fs/cgroup" + pod + "/cpu.pressure", own: true, logContains: "crio-abc.scope"},
		{name: "etcd's process not running", g: GuardOptions{PressureCgroup: lost}, logContains: `etcd's cgroup not found" err="no process named`},
		{name: "nothing", g: GuardOptions{}},
	} {
		var buf bytes.Buffer
		psi, cpu, own := pressureFiles(context.Background(), sys, c.g, "", slog.New(slog.NewTextHandler(&buf, nil)))
		if psi != c.psi || cpu != c.cpu || own != c.own {
			t.Errorf("%s: %q, %q, own %v; want %q, %q, %v", c.name, psi, cpu, own, c.psi, c.cpu, c.own)
		}
		if !strings.Contains(buf.String(), c.logContains) {
			t.Errorf("%s: journal %q lacks %q", c.name, buf.String(), c.logContains)
		}
	}
}

// The guard's inputs find a static pod's new cgroup after its container
// restarts; the journal says so once per change and once per loss.
func TestRefindPressure(t *testing.T) {
	cg, err := "/kubepods.slice/crio-new.scope", error(nil)
	var buf bytes.Buffer
	find := refindPressure(func() (string, error) { return cg, err }, "", "/sys/fs/cgroup/kubepods.slice/crio-old.scope/io.pressure", slog.New(slog.NewTextHandler(&buf, nil)))
	for i := 0; i < 2; i++ {
		psi, cpu, ferr := find()
		if ferr != nil || psi != "/sys/fs/cgroup"+cg+"/io.pressure" || cpu != "/sys/fs/cgroup"+cg+"/cpu.pressure" {
			t.Fatalf("%q, %q, %v", psi, cpu, ferr)
		}
	}
	err = errors.New(`no process named "etcd" runs`)
	for i := 0; i < 3; i++ {
		if _, _, ferr := find(); ferr == nil {
			t.Fatal("found etcd's cgroup with etcd gone")
		}
	}
	if n := strings.Count(buf.String(), "new cgroup"); n != 1 {
		t.Errorf("%d lines about the new cgroup, want 1:\n%s", n, buf.String())
	}
	if n := strings.Count(buf.String(), "not found again"); n != 1 {
		t.Errorf("%d lines about the loss, want 1:\n%s", n, buf.String())
	}
}
