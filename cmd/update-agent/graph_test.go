package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/graph"
	gt "github.com/update-agent/update-agent/agent/graph/graphtest"
	"github.com/update-agent/update-agent/agent/rpmostree"
)

// TestDoctorGraph: with updates.source = "graph", doctor's update-source
// line says whether the graph answers and where the booted release stands
// in it; a dead end and an unreachable graph fail it.
func TestDoctorGraph(t *testing.T) {
	bin := useStandin(t)
	st, err := (&rpmostree.Client{Path: bin.RpmOstree}).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := st.Booted()
	srv := gt.New(gt.Release{Version: "40.1", Checksum: b.Checksum, Rollout: gt.Done},
		gt.Release{Version: "40.2", Checksum: strings.Repeat("b", 64), Rollout: gt.Done})
	defer srv.Close()
	conf := func(url string) map[string]string {
		return map[string]string{"50-test.toml": `
[agent]
rpm_ostree = "` + bin.RpmOstree + `"
[updates]
source = "graph"
[cincinnati]
base_url = "` + url + `"
[identity]
stream = "stable"
[etcd]
endpoints = ["http://127.0.0.1:1"]
dial_timeout = "1s"
[staging]
paths = []
`}
	}
	_, out, _ := runIn("doctor", "--root", configRoot(t, conf(srv.URL)))
	want := "ok    update source  graph at " + srv.URL + " (stream stable, " + graph.HostBasearch() + "): reachable, 2 releases; booted 40.1 (age_index 0); update to 40.2 offered"
	if !strings.Contains(out, want) {
		t.Errorf("doctor output lacks %q:\n%s", want, out)
	}

	srv.Set(gt.Release{Version: "40.1", Checksum: b.Checksum, DeadEnd: "breaks etcd", Rollout: gt.Done})
	_, out, _ = runIn("doctor", "--root", configRoot(t, conf(srv.URL)))
	if want := "FAIL  update source  graph at " + srv.URL; !strings.Contains(out, want) || !strings.Contains(out, "a dead end (breaks etcd)") {
		t.Errorf("doctor on a dead end:\n%s", out)
	}

	srv.Close()
	_, out, _ = runIn("doctor", "--root", configRoot(t, conf(srv.URL)))
	if !strings.Contains(out, "FAIL  update source") || !strings.Contains(out, "update graph unreachable") {
		t.Errorf("doctor with the graph down:\n%s", out)
	}
}

// TestStatusGraphLines: status says where the booted release stands in the
// graph, a dead end on a line of its own, and an unreachable graph as such.
func TestStatusGraphLines(t *testing.T) {
	now := time.Now()
	var b strings.Builder
	r := statusReport{Graph: &graph.Report{At: now, BaseURL: "http://g", Reachable: true, InGraph: true, Stream: "stable",
		BootedVersion: "40.2", AgeIndex: 7, Nodes: 9, DeadEnd: true, DeadEndReason: "breaks etcd",
		Why: "booted release 40.2 is a dead end (breaks etcd): the graph offers no update from it"}}
	printStatus(&b, r, now)
	for _, want := range []string{"Update graph:", "booted 40.2 (age_index 7) in stream stable, 9 releases", "Dead end:", "40.2 is a dead end: breaks etcd"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	printStatus(&b, statusReport{Graph: &graph.Report{At: now, BaseURL: "http://g", Error: "update graph unreachable: x"}}, now)
	if !strings.Contains(b.String(), "http://g unreachable") || strings.Contains(b.String(), "Dead end") {
		t.Errorf("status:\n%s", b.String())
	}
}

// TestGraphTarget: stage-once's target with updates.source = "graph" is the
// graph's release, or none with the reason.
func TestGraphTarget(t *testing.T) {
	bin := useStandin(t)
	client := &rpmostree.Client{Path: bin.RpmOstree}
	st, err := client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := st.Booted()
	next := strings.Repeat("c", 64)
	srv := gt.New(gt.Release{Version: "40.1", Checksum: b.Checksum, Rollout: gt.Done}, gt.Release{Version: "40.2", Checksum: next, Rollout: gt.Done})
	defer srv.Close()
	cfg := config.Default()
	cfg.Updates.Source, cfg.Cincinnati.BaseURL, cfg.Identity.Stream = config.SourceGraph, srv.URL, "stable"
	tg, _, err := graphTarget(context.Background(), cfg, t.TempDir(), client, slog.Default())
	if err != nil || tg == nil || tg.Checksum != next {
		t.Fatalf("target %+v, %v; want %s", tg, err, next)
	}
	srv.Set(gt.Release{Version: "40.1", Checksum: b.Checksum, Rollout: gt.Done})
	tg, why, err := graphTarget(context.Background(), cfg, t.TempDir(), client, slog.Default())
	if err != nil || tg != nil || !strings.Contains(why, "is the newest the update graph offers") {
		t.Fatalf("target %+v, %q, %v; want none", tg, why, err)
	}
}

// TestWireGraph: updates.source = "graph" wires the graph source into the
// OS adapter and makes the stager deploy exactly, with [identity] as
// configured and node_uuid derived as zincati does.
func TestWireGraph(t *testing.T) {
	cfg := config.Default()
	cfg.Agent.NodeName = "n1"
	cfg.Lock.Enabled = false
	cfg.Updates.Source, cfg.Cincinnati.BaseURL = config.SourceGraph, "http://graph.example"
	cfg.Identity.Group, cfg.Identity.RolloutWariness = "etcd", 0.25
	root := t.TempDir()
	mustWrite(t, root+"/etc/machine-id", "3d1219c7c4c5404aaa1f6d2a48adfda4\n")
	mustWrite(t, root+"/proc/cmdline", "BOOT_IMAGE=x ignition.platform.id=metal\n")
	a, err := wire(cfg, root, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	if a.graph == nil || a.os.Graph != a.graph || !a.stager.Exact {
		t.Fatalf("graph source not wired: %+v", a.os)
	}
	// Only the graph can say a staged release was pulled: it is asked
	// again before queueing and before the hooks.
	if !a.policy().RecheckStaged {
		t.Error("the graph source does not re-check the staged release")
	}
	want := graph.Identity{Group: "etcd", NodeUUID: "975228d46dc94622b9bbe16671e2b58d", Platform: "metal", Wariness: 0.25}
	if a.graph.Identity != want || a.graph.Client.BaseURL != "http://graph.example" {
		t.Errorf("identity %+v, want %+v", a.graph.Identity, want)
	}
}

func mustWrite(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
