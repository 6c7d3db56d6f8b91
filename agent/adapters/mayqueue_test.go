package adapters

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// TestMayQueue: the engine's leader rule is etcdmember.MayAcquire, fed by
// the real cluster's health and the group's announcements: the leader waits
// while another member's node has an update pending, a follower does not.
func TestMayQueue(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{TickMs: 100, ElectionMs: 1000})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	policy := etcdmember.Policy{FollowersFirst: true, MoveLeader: true, RequireQuorum: true}
	node := func(i int, p etcdmember.Policy) (Cluster, *Lock) {
		m := c.Members[i]
		cli := c.Client(t, nil, m.ClientURL)
		lk := &Lock{Node: "node-" + m.Name, Make: func(context.Context) (*lock.Lock, error) {
			return lock.New(cli, lock.Options{Prefix: "/ua", Group: "g", Slots: 1, TTL: 20 * time.Second,
				Node: "node-" + m.Name, Member: m.Name, StateDir: t.TempDir()})
		}}
		t.Cleanup(lk.Close)
		return Cluster{C: etcdmember.New(cli, etcdmember.Options{LocalName: m.Name}), Lock: lk, Policy: p}, lk
	}
	lead := c.LeaderIndex()
	if lead < 0 {
		t.Fatal("no leader")
	}
	leader, _ := node(lead, policy)
	follower, followerLock := node((lead+1)%3, policy)
	unaware, _ := node(lead, etcdmember.Policy{RequireQuorum: true})
	want := func(name string, cl Cluster, ok bool, why string, unannounced ...string) {
		t.Helper()
		q, err := cl.MayQueue(ctx)
		if err != nil || q.MayQueue != ok || !strings.Contains(q.Reason, why) || !slices.Equal(q.Unannounced, unannounced) {
			t.Errorf("%s: MayQueue = %+v %v; want %v, reason containing %q, unannounced %v", name, q, err, ok, why, unannounced)
		}
	}
	if err := followerLock.Announce(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	want("leader, follower pending", leader, false, "updates after "+c.Members[(lead+1)%3].Name)
	want("follower", follower, true, "is a follower")
	want("leader rules off", unaware, true, "disabled")
	if err := followerLock.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	// The leader may queue, and names the members that announced nothing:
	// the engine gives them leader.followers_grace to announce.
	others := []string{c.Members[(lead+1)%3].Name, c.Members[(lead+2)%3].Name}
	slices.Sort(others)
	want("leader, nobody else pending", leader, true, "last member", others...)
}
