package etcdtest

import (
	"strings"
	"testing"
)

// Link is a client's own path to a member: a TCP proxy that a test can
// drop, as a network partition between one host and etcd does, while the
// member and every other client carry on.
type Link struct{ p *proxy }

// NewLink starts a proxy to member i's client URL; it closes at cleanup.
func (c *Cluster) NewLink(t testing.TB, i int) *Link {
	t.Helper()
	backend := strings.TrimPrefix(strings.TrimPrefix(c.Members[i].ClientURL, "http://"), "https://")
	p, err := newProxy("127.0.0.1:0", backend)
	if err != nil {
		t.Fatalf("link to member %d: %v", i, err)
	}
	t.Cleanup(p.close)
	return &Link{p: p}
}

// URL is the client URL through the link.
func (l *Link) URL() string { return "http://" + l.p.l.Addr().String() }

// Drop cuts every connection through the link and refuses new ones.
func (l *Link) Drop() {
	l.p.setDown(true)
	l.p.cut()
}

// Restore lets connections through again.
func (l *Link) Restore() { l.p.setDown(false) }
