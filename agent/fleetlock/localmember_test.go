package fleetlock_test

import (
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/fleetlock"
	"github.com/update-agent/update-agent/agent/lock"
)

// localID is this host's zincati id in these tests (graph.NodeUUID of its
// machine-id in the daemon).
const localID = "0123456789abcdef0123456789abcdef"

// localSource is where this host's zincati connects from: loopback, which
// is also the etcdtest members' address, so without the change every
// request from it is a member's and refused.
const localSource = "127.0.0.1"

// localServer serves FleetLock with member i of the cluster as this host's
// member, and the agents' [leader] defaults.
func (f *fixture) localServer(i, slots int) *httptest.Server {
	o := f.opts(slots)
	o.LocalMember = &fleetlock.LocalMember{NodeID: localID,
		Cluster: etcdmember.New(f.cli, etcdmember.Options{LocalName: f.c.Members[i].Name, Log: f.log}),
		Policy:  etcdmember.Policy{FollowersFirst: true, MoveLeader: true, RequireQuorum: true, MaxLag: 1000}}
	_, hs := f.server(o)
	return hs
}

// holders are the holders of group.
func (f *fixture) holders(t *testing.T, group string) []string {
	st, err := lock.Status(ctxT(t, 10*time.Second), f.cli, prefix, 2, group, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range st {
		if g.Group == group {
			return names(g.Holders)
		}
	}
	return nil
}

// follower is the index of a member that does not lead, other than not.
func (f *fixture) follower(not int) int {
	lead := f.c.LeaderIndex()
	for i := range f.c.Members {
		if i != lead && i != not {
			return i
		}
	}
	f.t.Fatal("no follower")
	return -1
}

// TestLocalMemberZincati: this host's zincati, its host a follower member,
// is granted only with quorum intact: while another member is down it is
// told member_unsafe (holding its slots, the leader unchanged); once the
// member is back it gets the group's and the cluster-wide member slot, and
// its steady-state frees both only once its own member is healthy again.
func TestLocalMemberZincati(t *testing.T) {
	f := newFixture(t, 3)
	local := f.follower(-1)
	hs := f.localServer(local, 2)
	node := lock.FleetLockNode(localID)

	other := f.follower(local)
	f.c.Stop(other)
	a := postFrom(t, localSource, hs.URL, fleetlock.PathPreReboot, localID, "default")
	if a.ok() || a.Kind != string(fleetlock.KindMemberUnsafe) || !strings.Contains(a.Value, f.c.Members[other].Name) {
		t.Fatalf("with member %s down: got %+v, want failed_lock_member_unsafe naming it", f.c.Members[other].Name, a)
	}
	if err := f.c.Restart(other); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for a = postFrom(t, localSource, hs.URL, fleetlock.PathPreReboot, localID, "default"); !a.ok(); a = postFrom(t, localSource, hs.URL, fleetlock.PathPreReboot, localID, "default") {
		if time.Now().After(deadline) {
			t.Fatalf("member back: still %+v", a)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if g, m := f.holders(t, "default"), f.holders(t, lock.MembersGroup); !slices.Contains(g, node) || !slices.Equal(m, []string{node}) {
		t.Fatalf("granted: group holders %v, member slot %v; want %s in both", g, m, node)
	}

	// Its reboot: the member is down until etcd serves it again.
	f.c.Stop(local)
	a = postFrom(t, localSource, hs.URL, fleetlock.PathSteadyState, localID, "default")
	if a.ok() || a.Kind != string(fleetlock.KindMemberUnsafe) {
		t.Fatalf("steady-state with the local member down: got %+v, want failed_lock_member_unsafe", a)
	}
	if m := f.holders(t, lock.MembersGroup); !slices.Equal(m, []string{node}) {
		t.Fatalf("member slot released while the member is down: %v", m)
	}
	if err := f.c.Restart(local); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for a = postFrom(t, localSource, hs.URL, fleetlock.PathSteadyState, localID, "default"); !a.ok(); a = postFrom(t, localSource, hs.URL, fleetlock.PathSteadyState, localID, "default") {
		if time.Now().After(deadline) {
			t.Fatalf("member back: steady-state still %+v", a)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if g, m := f.holders(t, "default"), f.holders(t, lock.MembersGroup); len(g)+len(m) != 0 {
		t.Fatalf("after steady-state: group holders %v, member slot %v; want none", g, m)
	}
}

// TestLocalMemberZincatiWaitsForMemberSlot: another member's agent holds
// the cluster-wide member slot. The group has a slot free, which a worker's
// zincati would get; this host's zincati takes it but is refused until the
// agent releases the member slot.
func TestLocalMemberZincatiWaitsForMemberSlot(t *testing.T) {
	f := newFixture(t, 3)
	local := f.follower(-1)
	hs := f.localServer(local, 2)
	other := f.follower(local)
	l, err := lock.New(f.cli, lock.Options{Prefix: prefix, Group: "default", Slots: 2, TTL: 30 * time.Second,
		Node: "cp-other", BootID: "boot-other", Member: f.c.Members[other].Name, StateDir: t.TempDir(), Log: f.log})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	if _, err := l.Acquire(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	a := postFrom(t, localSource, hs.URL, fleetlock.PathPreReboot, localID, "default")
	if a.ok() || a.Kind != string(fleetlock.KindSemaphoreFull) || !strings.Contains(a.Value, lock.MembersGroup) {
		t.Fatalf("member slot held by %s: got %+v, want failed_lock_semaphore_full of %s", f.c.Members[other].Name, a, lock.MembersGroup)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if a := postFrom(t, localSource, hs.URL, fleetlock.PathPreReboot, localID, "default"); !a.ok() {
		t.Fatalf("member slot free: got %+v", a)
	}
}

// TestLocalMemberZincatiMovesLeadership: this host's member leads. While
// another member's node has an update announced, its zincati is not even
// queued (followers first); then its pre-reboot returns 200 only once
// another member leads, as the real cluster reports right at the answer.
func TestLocalMemberZincatiMovesLeadership(t *testing.T) {
	f := newFixture(t, 3)
	lead := f.c.LeaderIndex()
	if lead < 0 {
		t.Fatal("no leader")
	}
	hs := f.localServer(lead, 2)
	other := f.follower(lead)
	ann, _ := json.Marshal(lock.Announcement{Node: "cp-other", Member: f.c.Members[other].Name, Target: "c1"})
	key := lock.PendingPrefix(prefix, "default") + "cp-other"
	ctx := ctxT(t, 30*time.Second)
	if _, err := f.cli.Put(ctx, key, string(ann)); err != nil {
		t.Fatal(err)
	}
	a := postFrom(t, localSource, hs.URL, fleetlock.PathPreReboot, localID, "default")
	if a.ok() || a.Kind != string(fleetlock.KindMemberUnsafe) || !strings.Contains(a.Value, "updates after "+f.c.Members[other].Name) {
		t.Fatalf("leader with member %s pending: got %+v, want failed_lock_member_unsafe (followers first)", f.c.Members[other].Name, a)
	}
	if h := f.holders(t, "default"); len(h) != 0 || f.c.LeaderIndex() != lead {
		t.Fatalf("leader queued (%v) or moved (%d) while a follower is pending", h, f.c.LeaderIndex())
	}
	if _, err := f.cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	a = postFrom(t, localSource, hs.URL, fleetlock.PathPreReboot, localID, "default")
	now := f.c.LeaderIndex()
	if !a.ok() {
		t.Fatalf("leader's zincati: got %+v, want a grant after the move", a)
	}
	if now == lead || now < 0 {
		t.Fatalf("granted while member %s still leads (leader index %d)", f.c.Members[lead].Name, now)
	}
	if !strings.Contains(f.buf.String(), "moved etcd leadership away before this host's reboot") {
		t.Error("the move is not logged")
	}
}

// TestLocalMemberOthersRefused: serving the local member admits no other
// member: another id from a member's address is refused as before, while
// this host's own zincati takes the member slot; without the key, this
// host's zincati is refused too. (A request that is not over loopback, or
// comes from a listed proxy, is never this host's: TestLocalClient.)
func TestLocalMemberOthersRefused(t *testing.T) {
	f := newFixture(t, 3)
	local := f.follower(-1)
	hs := f.localServer(local, 2)
	if a := postFrom(t, localSource, hs.URL, fleetlock.PathPreReboot, "fedcba9876543210fedcba9876543210", "default"); a.Kind != string(fleetlock.KindEtcdMember) {
		t.Errorf("another member's zincati: got %+v, want client_is_etcd_member", a)
	}
	if a := postFrom(t, localSource, hs.URL, fleetlock.PathPreReboot, localID, "default"); !a.ok() {
		t.Errorf("this host's zincati: got %+v, want a grant", a)
	}
	if m := f.holders(t, lock.MembersGroup); !slices.Equal(m, []string{lock.FleetLockNode(localID)}) {
		t.Errorf("member slot: %v; want only this host's zincati", m)
	}

	o := f.opts(2)
	_, off := f.server(o)
	if a := postFrom(t, localSource, off.URL, fleetlock.PathPreReboot, localID, "default"); a.Kind != string(fleetlock.KindEtcdMember) {
		t.Errorf("serve_local_member off: got %+v, want client_is_etcd_member", a)
	}
}

// TestLocalMemberZincatiRefusedAlone: a 1-member cluster loses quorum with
// any reboot of its member: without etcd.allow_quorum_loss its zincati is
// refused and not even queued, so it blocks nobody.
func TestLocalMemberZincatiRefusedAlone(t *testing.T) {
	f := newFixture(t, 1)
	hs := f.localServer(0, 2)
	a := postFrom(t, localSource, hs.URL, fleetlock.PathPreReboot, localID, "default")
	if a.ok() || a.Kind != string(fleetlock.KindMemberUnsafe) || !strings.Contains(a.Value, "allow_quorum_loss") {
		t.Fatalf("lone member: got %+v, want failed_lock_member_unsafe naming etcd.allow_quorum_loss", a)
	}
	if g, m := f.holders(t, "default"), f.holders(t, lock.MembersGroup); len(g)+len(m) != 0 {
		t.Fatalf("refused but queued: group %v, member slot %v", g, m)
	}
}
