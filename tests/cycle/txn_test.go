package cycle

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/agent/txn"
	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/rpmostree/standin"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// TestKilledMidDeployStagesWithoutFailure: the agent's process is SIGKILLed
// (with its rpm-ostree client) while the stand-in's deploy runs; the
// daemon, like rpm-ostreed, keeps the transaction running. The agent
// started again cancels that transaction (its staging record names it),
// stages the update and locks it, and the failed-attempt count does not
// grow: a few crashes must not set an update aside.
func TestKilledMidDeployStagesWithoutFailure(t *testing.T) {
	// Not parallel: etcdtest picks ports that were free a moment ago.
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	r := &rollout{t: t, c: c, cli: c.Client(t, nil), logFile: filepath.Join(t.TempDir(), "agents.log")}
	n := &node{name: "node-0", member: c.Members[0].Name, env: standintest.New(t, bin), stateDir: t.TempDir(),
		bootID: "boot-0", hold: true}
	r.nodes = []*node{n}
	// Each pull waits first, so the deploy is still running when the agent
	// dies and when it comes back.
	n.env.StopDaemon()
	n.env.DaemonEnv = []string{standin.EnvPullDelay + "=15s"}
	n.env.StartDaemon()
	n.target = n.env.Publish(n.env.Ref, 1)
	t.Cleanup(func() {
		if n.cmd != nil {
			r.kill(n)
		}
		if t.Failed() {
			b, _ := os.ReadFile(r.logFile)
			t.Logf("agent's log:\n%s", b)
		}
	})

	transaction := func() *rpmostree.Transaction {
		out, _, code := n.env.CLI("", "status", "--json")
		if code != 0 {
			return nil
		}
		st, err := rpmostree.ParseStatus([]byte(out))
		if err != nil {
			return nil
		}
		return st.Transaction
	}
	r.start(n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !standintest.WaitFor(ctx, func() bool { t := transaction(); return t != nil && t.Method == "Deploy" }) {
		t.Fatalf("the agent's deploy never showed in status: %+v", r.record(n))
	}
	r.kill(n)
	if tx := transaction(); tx == nil || tx.Method != "Deploy" {
		t.Fatalf("the killed agent's deploy is not running any more (%+v): the test would prove nothing", tx)
	}
	if st := r.record(n); st.Phase != state.Staging || st.Failures[n.target].Count != 0 {
		t.Fatalf("record at the kill: %+v", st)
	}

	r.start(n)
	ctx, cancel = context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	staged := func() bool {
		st := r.record(n)
		return st.Phase == state.Staged && st.Locked == n.target || st.Failures[n.target].Count > 0
	}
	if !standintest.WaitFor(ctx, staged) {
		t.Fatalf("not staged after the restart: %+v", r.record(n))
	}
	if st := r.record(n); st.Phase != state.Staged || len(st.Failures) > 0 {
		t.Errorf("after the restart: phase %s, failures %+v; want staged with no failure", st.Phase, st.Failures)
	}
	b, _ := os.ReadFile(r.logFile)
	if !strings.Contains(string(b), "rpm-ostree still runs the Deploy transaction of an agent process that is gone") {
		t.Error("the agent did not say it cancels its earlier process's transaction")
	}
	if !strings.Contains(n.env.DaemonLog(), "Operation was cancelled") {
		t.Error("the daemon never cancelled the orphaned deploy")
	}
	if _, err := os.Stat(filepath.Join(n.stateDir, txn.RecordFile)); !os.IsNotExist(err) {
		t.Errorf("staging transaction record left after staging: %v", err)
	}
}
