package cycle

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/engine"
	gt "github.com/update-agent/update-agent/agent/graph/graphtest"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// waitPulled waits until the engine gave up target as pulled: set aside,
// its staged deployment discarded, idle.
func (g *graphSolo) waitPulled(target string) {
	g.t.Helper()
	g.wait(target+" set aside as pulled, discarded", func(s engine.Snapshot) bool {
		f := s.State.Failures[target]
		return f.SetAside && strings.Contains(f.LastError, "was pulled") && s.State.Phase == state.Idle && s.OS.Staged == nil
	})
}

// TestGraphPulledWhileStaged: Fedora pulls 40.2 (takes it out of the graph)
// while it waits staged for the window: the node discards it and sets it
// aside, does not take it again when the graph lists it again, and stages
// the release that replaces it.
func TestGraphPulledWhileStaged(t *testing.T) {
	t.Parallel()
	g := newGraphSolo(t)
	a := g.solo
	base := booted(t, a)
	time.Sleep(1100 * time.Millisecond) // commit timestamps are seconds
	broken := a.env.Publish(a.env.Ref, 1)
	time.Sleep(1100 * time.Millisecond)
	fixed := a.env.Publish(a.env.Ref, 2)
	r0 := gt.Release{Version: "40.1", Checksum: base, Rollout: gt.Done}
	r1 := gt.Release{Version: "40.2", Checksum: broken, Rollout: gt.Done}
	g.srv.Set(r0, r1)
	g.start()
	a.waitStaged(broken)
	g.srv.Set(r0)
	g.waitPulled(broken)
	if !strings.Contains(a.logb.String(), "the update graph no longer offers it from booted 40.1") {
		t.Error("the agent did not say why it discarded the staged release")
	}
	// Listed again: set aside, not staged.
	g.srv.Set(r0, r1)
	a.wait("40.2 reported set aside", func(s engine.Snapshot) bool {
		return s.Action.Kind == engine.ActWait && strings.Contains(s.Action.Reason, "update "+broken+" set aside (release ")
	})
	if s := a.eng.Snapshot(); s.OS.Staged != nil {
		t.Fatalf("staged %+v", s.OS.Staged)
	}
	g.srv.Set(r0, r1, gt.Release{Version: "40.3", Checksum: fixed, Rollout: gt.Done})
	a.waitStaged(fixed)
	if a.env.Rebooted() {
		t.Fatal("rebooted")
	}
}

// TestGraphPulledBeforeImmediateReboot: with the window always open
// (strategy "immediate", no check while staged for a window), a release
// pulled while it stages, or while the node waits in line for a slot, is
// not applied: the graph is asked again before queueing and once the slot
// is granted, before the hooks.
func TestGraphPulledBeforeImmediateReboot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// after is the graph answer after which Fedora pulls 40.2: the
		// first offers it (staging follows), the second is the check
		// before queueing.
		after int32
	}{{"while staging", 1}, {"while waiting for the slot", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGraphSolo(t)
			a := g.solo
			base := booted(t, a)
			time.Sleep(1100 * time.Millisecond)
			broken := a.env.Publish(a.env.Ref, 1)
			r0 := gt.Release{Version: "40.1", Checksum: base, Rollout: gt.Done}
			g.srv.Set(r0, gt.Release{Version: "40.2", Checksum: broken, Rollout: gt.Done})
			var answers atomic.Int32
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				resp, err := http.Get(g.srv.URL + r.URL.RequestURI())
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadGateway)
					return
				}
				defer resp.Body.Close()
				w.WriteHeader(resp.StatusCode)
				io.Copy(w, resp.Body)
				if answers.Add(1) == tc.after {
					g.srv.Set(r0)
				}
			}))
			defer front.Close()
			g.src.Client.BaseURL = front.URL
			g.setWindow(true)
			g.start()
			g.waitPulled(broken)
			if a.env.Rebooted() {
				t.Fatal("rebooted into the pulled release")
			}
			if n := answers.Load(); n < tc.after+1 {
				t.Fatalf("%d graph answers", n)
			}
		})
	}
}

// TestGraphStagedOnAnotherStream: a release staged from the graph whose
// commit names another stream than the one followed is discarded and set
// aside like a pulled one, and not staged again while offered (zincati's
// confirm_valid_stream). The stand-in's commits name no stream: a wrapper
// adds "next" to status, as a Fedora CoreOS commit carries its stream.
func TestGraphStagedOnAnotherStream(t *testing.T) {
	t.Parallel()
	g := newGraphSolo(t)
	a := g.solo
	base := booted(t, a)
	time.Sleep(1100 * time.Millisecond) // commit timestamps are seconds
	other := a.env.Publish(a.env.Ref, 1)
	g.rpmOstree = standintest.OnStream(t, bin.RpmOstree, "next")
	g.srv.Set(gt.Release{Version: "40.1", Checksum: base, Rollout: gt.Done}, gt.Release{Version: "40.2", Checksum: other, Rollout: gt.Done})
	g.start()
	g.wait("40.2 set aside as on another stream, discarded", func(s engine.Snapshot) bool {
		f := s.State.Failures[other]
		return f.SetAside && f.Count == 0 && strings.Contains(f.LastError, `from stream "next", not "stable"`) &&
			s.State.Phase == state.Idle && s.OS.Staged == nil
	})
	a.wait("40.2 reported set aside", func(s engine.Snapshot) bool {
		return s.Action.Kind == engine.ActWait && strings.Contains(s.Action.Reason, "update "+other+" set aside (")
	})
	if s := a.eng.Snapshot(); s.OS.Staged != nil || a.env.Rebooted() {
		t.Fatalf("staged %+v, or rebooted", s.OS.Staged)
	}
}
