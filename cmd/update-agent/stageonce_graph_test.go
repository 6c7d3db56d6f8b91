package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/config"
	gt "github.com/update-agent/update-agent/agent/graph/graphtest"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/stage"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// plainOnce stands in for the daemon's stager without systemd: the same
// adapter code (PlainStager.StageOnce) checks and discards.
type plainOnce struct{ adapters.PlainStager }

func (p plainOnce) Run(ctx context.Context, req rpmostree.StageRequest) (stage.Report, error) {
	_, err := p.Client.Stage(ctx, req)
	return stage.Report{}, err
}

// TestStageOnceGraphChecksStream: stage-once with updates.source = "graph"
// stages as the daemon does, stream check included (zincati's
// confirm_valid_stream): a release whose commit names another stream than
// identity.stream is discarded and stage-once exits 81 naming both; on the
// stream followed it stays staged. The stand-in's commits name no stream:
// a wrapper adds "next" to status, as a Fedora CoreOS commit carries it
// (as in tests/cycle TestGraphStagedOnAnotherStream).
func TestStageOnceGraphChecksStream(t *testing.T) {
	env := standintest.New(t, standin(t))
	for _, kv := range env.ClientEnv("") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	ctx := context.Background()
	plain := &rpmostree.Client{Path: standin(t).RpmOstree}
	st, err := plain.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := st.Booted()
	time.Sleep(1100 * time.Millisecond) // commit timestamps are seconds
	next := env.Publish(env.Ref, 1)
	srv := gt.New(gt.Release{Version: "40.1", Checksum: b.Checksum, Rollout: gt.Done}, gt.Release{Version: "40.2", Checksum: next, Rollout: gt.Done})
	defer srv.Close()
	wrapper := standintest.OnStream(t, plain.Path, "next")
	conf := func(stream string) map[string]string {
		return map[string]string{"50-test.toml": `
[agent]
rpm_ostree = "` + wrapper + `"
[updates]
source = "graph"
[cincinnati]
base_url = "` + srv.URL + `"
[identity]
stream = "` + stream + `"
[etcd]
endpoints = ["http://127.0.0.1:1"]
dial_timeout = "1s"
[staging]
paths = []
`}
	}
	// stage-once's stager is the daemon's, exact; the stand-in below only
	// replaces its systemd unit.
	cfg := config.Default()
	cfg.Updates.Source = config.SourceGraph
	if s, ok := newOnceStager(cfg, t.TempDir(), plain, slog.Default()).(*adapters.Stager); !ok || !s.Exact {
		t.Fatalf("stage-once's stager with the graph source is not the daemon's exact one: %#v", s)
	}
	orig := newOnceStager
	t.Cleanup(func() { newOnceStager = orig })
	newOnceStager = func(cfg *config.Config, root string, client *rpmostree.Client, _ *slog.Logger) onceStager {
		return plainOnce{adapters.PlainStager{Client: client, Exact: true, Override: rooted(root, rpmostree.BootedOverrideFile)}}
	}
	staged := func() *rpmostree.Deployment {
		st, err := plain.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := st.Staged(); ok {
			return &s
		}
		return nil
	}

	code, out, errs := runIn("stage-once", "--root", configRoot(t, conf("stable")))
	if code != exitWrongStream || !strings.Contains(errs, `from stream "next", not "stable"`) || !strings.Contains(errs, "discarded its staged deployment") {
		t.Errorf("stage-once on another stream: exit %d, want %d, the streams named and the discard\nstdout: %s\nstderr: %s", code, exitWrongStream, out, errs)
	}
	if s := staged(); s != nil {
		t.Fatalf("staged after the refusal: %+v", s)
	}

	code, out, errs = runIn("stage-once", "--root", configRoot(t, conf("next")))
	if code != exitOK || !strings.Contains(out, "release 40.2 ("+next+"): staged") {
		t.Errorf("stage-once on the stream followed: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if s := staged(); s == nil || s.Target() != next {
		t.Fatalf("staged %+v, want %s", s, next)
	}
}
