package etcdmember_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLocalLeaderHealth(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	ctx := ctxT(t)
	cli := c.Client(t, nil)
	for i, m := range c.Members {
		// auto: the member serving the local endpoint.
		cl := etcdmember.New(cli, etcdmember.Options{LocalName: "auto", LocalEndpoints: []string{m.ClientURL}})
		local, found, err := cl.Local(ctx)
		if err != nil || !found || local.Name != m.Name {
			t.Errorf("member %d: Local = %+v, %v, %v", i, local, found, err)
		}
	}
	cl := etcdmember.New(cli, etcdmember.Options{LocalName: "m1"})
	h, err := cl.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lead, ok := h.Leader()
	if !ok || lead.Name != c.Members[c.LeaderIndex()].Name {
		t.Errorf("Leader = %+v, %v; cluster says %d", lead, ok, c.LeaderIndex())
	}
	for _, m := range h.Members {
		if p := h.Problem(m, 1000); p != "" {
			t.Errorf("healthy cluster: %s", p)
		}
	}
	if _, _, err := etcdmember.New(cli, etcdmember.Options{LocalName: "nope"}).Local(ctx); err == nil {
		t.Error("unknown configured member name accepted")
	}
	// A worker: no name, no loopback endpoint.
	if _, found, err := etcdmember.New(cli, etcdmember.Options{LocalEndpoints: []string{}}).Local(ctx); found || err != nil {
		t.Errorf("worker: found=%v err=%v", found, err)
	}
}

// TestQuorumGuard: with one of three members down, no other member may go
// down; once it is back, a follower may.
func TestQuorumGuard(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	ctx := ctxT(t)
	lead := c.LeaderIndex()
	down, local := (lead+1)%3, (lead+2)%3
	c.Stop(down)
	cli := c.Client(t, nil, c.Members[lead].ClientURL, c.Members[local].ClientURL)
	cl := etcdmember.New(cli, etcdmember.Options{LocalName: c.Members[local].Name, CallTimeout: 500 * time.Millisecond})
	pol := etcdmember.Policy{FollowersFirst: true, MoveLeader: true, RequireQuorum: true, MaxLag: 1000}

	ok, why, err := cl.QuorumSafeWithout(ctx, c.Members[local].Name)
	if err != nil || ok || !strings.Contains(why, "only 1 of 3") {
		t.Errorf("QuorumSafeWithout with a member down = %v, %q, %v; want refusal", ok, why, err)
	}
	h, err := cl.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := etcdmember.MayReboot(pol, etcdmember.Situation{Local: c.Members[local].Name, Health: h})
	if d.Verdict != etcdmember.Wait || !strings.Contains(d.Reason, c.Members[down].Name+" unreachable") {
		t.Errorf("MayReboot with %s down = %v %q", c.Members[down].Name, d.Verdict, d.Reason)
	}

	if err := c.Restart(down); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err = cl.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d = etcdmember.MayReboot(pol, etcdmember.Situation{Local: c.Members[local].Name, Health: h})
		if d.Verdict == etcdmember.Proceed || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d.Verdict != etcdmember.Proceed {
		t.Errorf("MayReboot after the member came back = %v %q", d.Verdict, d.Reason)
	}
}

// TestMoveLeaderAway: the leader hands over to the preferred follower, the
// move is confirmed, and it costs exactly one term.
func TestMoveLeaderAway(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	ctx := ctxT(t)
	lead := c.LeaderIndex()
	want := c.Members[(lead+2)%3].Name
	cli := c.Client(t, nil)
	cl := etcdmember.New(cli, etcdmember.Options{LocalName: c.Members[lead].Name})
	term := c.Term()
	start := time.Now()
	defer func() { t.Log("took", time.Since(start)) }()
	got, err := cl.MoveLeaderAway(ctx, func(n string) bool { return n == want })
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != want || c.Members[c.LeaderIndex()].Name != want {
		t.Errorf("leader after move: %s (cluster says %d), want %s", got.Name, c.LeaderIndex(), want)
	}
	if d := c.Term() - term; d != 1 {
		t.Errorf("move cost %d terms, want 1", d)
	}
	// From a follower it is a no-op that names the leader.
	again, err := etcdmember.New(cli, etcdmember.Options{LocalName: c.Members[lead].Name}).MoveLeaderAway(ctx, nil)
	if err != nil || again.Name != want {
		t.Errorf("MoveLeaderAway from a follower = %+v, %v", again, err)
	}
}
