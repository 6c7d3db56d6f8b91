package etcdtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// FillBackend writes until etcd refuses with "database space exceeded",
// which raises a real NOSPACE alarm on a member started with a small
// Options.QuotaBackendBytes, and returns the last revision written.
func FillBackend(t testing.TB, ctx context.Context, cli *clientv3.Client) int64 {
	t.Helper()
	val := strings.Repeat("x", 64<<10)
	var rev int64
	// etcd checks the quota against the backend's size as of its last
	// commit (every 100 ms), so a fast machine can put far past the quota
	// before the check sees it: write until refused, bounded by time.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		resp, err := cli.Put(ctx, "fill", val)
		if err != nil {
			if strings.Contains(err.Error(), "database space exceeded") {
				return rev
			}
			t.Fatalf("filling the backend: %v", err)
		}
		rev = resp.Header.Revision
		if i%16 == 15 {
			time.Sleep(150 * time.Millisecond) // let a commit update the size
		}
	}
	t.Fatal("the backend quota never filled")
	return 0
}

// FreeAndDisarm does what an operator does after NOSPACE: compact up to rev,
// defragment endpoint, disarm every alarm.
func FreeAndDisarm(t testing.TB, ctx context.Context, cli *clientv3.Client, endpoint string, rev int64) {
	t.Helper()
	if _, err := cli.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Defragment(ctx, endpoint); err != nil {
		t.Fatal(err)
	}
	list, err := cli.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list.Alarms {
		if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: etcdserverpb.AlarmType_NOSPACE}); err != nil {
			t.Fatal(err)
		}
	}
}
