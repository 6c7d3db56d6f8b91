package etcdtest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// AddLearner adds a member to the running cluster as a learner and starts
// it, listening and advertising on host (a loopback address such as
// 127.0.0.2, so that a test may see it as another host's member), and waits
// until it has published its name. A learner does not count for quorum: a
// one-member cluster keeps serving while it joins. Like a host that became
// a member while its agent ran.
func (c *Cluster) AddLearner(t testing.TB, host string) *Member {
	t.Helper()
	i := len(c.Members)
	ports := freePorts(t, 3)
	scheme := "http"
	if c.opts.TLS != nil {
		scheme = "https"
	}
	m := &Member{
		Name:      fmt.Sprintf("m%d", i),
		Dir:       filepath.Join(filepath.Dir(c.Members[0].Dir), fmt.Sprintf("m%d", i)),
		ClientURL: fmt.Sprintf("%s://%s:%d", scheme, host, ports[0]),
		PeerURL:   fmt.Sprintf("http://%s:%d", host, ports[1]),
		listenURL: fmt.Sprintf("%s://%s:%d", scheme, host, ports[2]),
	}
	var err error
	if m.proxy, err = newProxy(fmt.Sprintf("%s:%d", host, ports[0]), fmt.Sprintf("%s:%d", host, ports[2])); err != nil {
		t.Fatalf("etcdtest: client proxy of the new member: %v", err)
	}
	cli := c.Client(t, c.clientTLS())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.MemberAddAsLearner(ctx, []string{m.PeerURL}); err != nil {
		m.proxy.close()
		t.Fatalf("etcdtest: adding a learner on %s: %v", host, err)
	}
	c.Members = append(c.Members, m)
	c.initial += "," + m.Name + "=" + m.PeerURL
	if err := c.start(i, "existing"); err != nil {
		t.Fatalf("etcdtest: starting the learner %s: %v", m.Name, err)
	}
	for {
		resp, err := cli.MemberList(ctx)
		if err != nil {
			t.Fatalf("etcdtest: waiting for the learner %s to publish its name: %v", m.Name, err)
		}
		for _, pm := range resp.Members {
			if pm.Name == m.Name {
				return m
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("etcdtest: the learner %s did not publish its name", m.Name)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
