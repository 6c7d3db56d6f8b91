package rollout_test

import (
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/rollout"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

var bin standintest.Binaries

func TestMain(m *testing.M) { standintest.Main(m, &bin) }

// check asserts what every leader-aware rollout must give: each node
// rebooted once, the initial leader last, leadership moved exactly once
// (by its agent, no election), and never a reboot while another member was
// down.
func check(t *testing.T, f *rollout.Fleet, r rollout.Result) {
	t.Helper()
	t.Logf("initial leader %s, reboot order %v, leader changes %d, elections %d (planned moves %d), missing %v, took %v",
		f.Nodes[r.InitialLeader].Name, r.Order, r.LeaderChanges, r.Elections, r.Moves, r.Missing, r.Total.Round(time.Millisecond))
	if r.Order[len(r.Order)-1] != r.InitialLeader {
		t.Errorf("reboot order %v: the initial leader %d did not go last", r.Order, r.InitialLeader)
	}
	if r.LeaderChanges != 1 || r.Moves != 1 || r.Unplanned() != 0 {
		t.Errorf("leader changes %d, planned moves %d, elections %d: want one planned move and no other election",
			r.LeaderChanges, r.Moves, r.Elections)
	}
	for _, v := range r.Violations {
		t.Error(v)
	}
}

// TestRollingUpdate: three hosts find an update at once, stage it locked,
// and reboot one at a time through the lock, followers first and the
// leader last after handing leadership over; each releases its slot once
// its member is healthy again. Twice, from different initial leaders.
func TestRollingUpdate(t *testing.T) {
	// Not parallel: etcdtest picks ports that were free a moment ago.
	p, lp := rollout.LeaderAware()
	f := rollout.New(t, rollout.Options{Bin: bin, Policy: p, Leader: lp})
	for gen := 1; gen <= 2; gen++ {
		r, err := f.Rollout(rollout.RunOptions{Gen: gen, InitialLeader: (f.C.LeaderIndex() + gen) % len(f.Nodes)})
		if err != nil {
			t.Fatal(err)
		}
		check(t, f, r)
	}
}

// TestLateFollowers: the followers find the update only after the leader's
// node has staged it (their checks come later, or take longer): nobody has
// announced an update when the leader asks whether it may queue. It gives
// them leader.followers_grace to announce, so they still go first and
// leadership moves once.
func TestLateFollowers(t *testing.T) {
	p, lp := rollout.LeaderAware()
	f := rollout.New(t, rollout.Options{Bin: bin, Policy: p, Leader: lp})
	r, err := f.Rollout(rollout.RunOptions{Gen: 1, InitialLeader: -1, LateFollowers: rollout.FollowersGrace / 3})
	if err != nil {
		t.Fatal(err)
	}
	check(t, f, r)
}

// TestMemberDownMidRollout: the first updated member goes down while the
// second rebooted node still holds the slot, for longer than the last node
// needs to take the slot and check (each health check waits out its 2 s
// call timeout on the member that is down). The last node holds the slot
// without rebooting until the member is back: never a second member down
// (with require_quorum off this fails), and the rollout ends as usual.
func TestMemberDownMidRollout(t *testing.T) {
	p, lp := rollout.LeaderAware()
	f := rollout.New(t, rollout.Options{Bin: bin, Policy: p, Leader: lp})
	r, err := f.Rollout(rollout.RunOptions{Gen: 1, InitialLeader: -1, MemberDown: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	check(t, f, r)
}
