package etcdtest

import (
	"context"
	"testing"
	"time"
)

func TestClusterStopRestart(t *testing.T) {
	start := time.Now()
	c := Start(t, Options{})
	t.Logf("3 members ready in %v", time.Since(start))
	cli := c.Client(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	lead := c.LeaderIndex()
	if lead < 0 {
		t.Fatal("no leader")
	}
	follower := (lead + 1) % 3
	start = time.Now()
	c.Stop(follower)
	t.Logf("stop in %v", time.Since(start))
	if c.Running(follower) {
		t.Fatal("stopped member still running")
	}
	start = time.Now()
	if err := c.Restart(follower); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart in %v", time.Since(start))
	resp, err := c.Client(t, nil, c.Members[follower].ClientURL).Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("reading from the restarted member: %v %v", resp, err)
	}
}
