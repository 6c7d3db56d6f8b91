package adapters

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/tests/etcdtest"
)

// TestSmallClusterPolicy: on a real 1-member cluster the member is refused
// (ErrRefused, with the reason naming the override) instead of waiting for
// a quorum that can never survive it; with etcd.allow_quorum_loss it may go,
// and it is not asked to hand leadership to nobody.
func TestSmallClusterPolicy(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := etcdmember.New(c.Client(t, nil), etcdmember.Options{LocalName: c.Members[0].Name})
	pol := etcdmember.Policy{FollowersFirst: true, MoveLeader: true, RequireQuorum: true, MaxLag: m.MaxLag()}
	ok, why, err := Cluster{C: m, Policy: pol}.SafeToReboot(ctx)
	if ok || !errors.Is(err, engine.ErrRefused) || !strings.Contains(why, "etcd.allow_quorum_loss") {
		t.Errorf("1-member cluster: SafeToReboot = %v %q %v; want refused naming etcd.allow_quorum_loss", ok, why, err)
	}
	pol.AllowQuorumLoss = true
	cl := Cluster{C: m, Policy: pol}
	if ok, why, err := cl.SafeToReboot(ctx); !ok || err != nil {
		t.Errorf("1-member cluster, quorum loss allowed: SafeToReboot = %v %q %v", ok, why, err)
	}
	if lead, err := cl.LocalIsLeader(ctx); lead || err != nil {
		t.Errorf("sole member: LocalIsLeader = %v, %v; want false (no one to hand leadership to)", lead, err)
	}
}
