package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/lock"
)

// renewer passes Fence's renewal to etcd, counting it, and then answers
// what the case says: the lease's remaining TTL (ttl >= 0) or an error.
type renewer struct {
	real  clientv3.Lease
	calls atomic.Int32
	ids   chan clientv3.LeaseID
	ttl   int64
	err   error
}

func (r *renewer) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	r.calls.Add(1)
	select {
	case r.ids <- id:
	default:
	}
	if r.err != nil {
		return nil, r.err
	}
	resp, err := r.real.KeepAliveOnce(ctx, id)
	if err != nil {
		return nil, err
	}
	if r.ttl >= 0 {
		resp.TTL = r.ttl
	}
	return resp, nil
}

// TestFenceRenewsTheLease: Fence renews the node lease itself and refuses
// when less than half of the reboot budget is left after the renewal (a
// lease about to run out would free the slot during the reboot). The
// session's background keepalive is not enough: it may lag or have
// stopped, and only the fence's own answer says how long the slot lasts.
func TestFenceRenewsTheLease(t *testing.T) {
	f := newFixture(t)
	const ttl = 30 * time.Second
	for _, tc := range []struct {
		name string
		ttl  int64 // seconds left, as the renewal answers; -1: etcd's own
		err  error
		want func(error) bool
	}{
		{name: "renewed", ttl: -1, want: isNil},
		{name: "full budget left", ttl: 30, want: isNil},
		{name: "exactly half left", ttl: 15, want: isNil},
		{name: "under half left", ttl: 14, want: isErr},
		{name: "one second left", ttl: 1, want: isErr},
		{name: "lease gone", ttl: -1, err: rpctypes.ErrLeaseNotFound, want: func(err error) bool { return errors.Is(err, lock.ErrLeaseExpired) }},
		{name: "etcd unreachable", ttl: -1, err: context.DeadlineExceeded, want: func(err error) bool {
			return isErr(err) && !errors.Is(err, lock.ErrLeaseExpired) && !errors.Is(err, lock.ErrNotHolder)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 20*time.Second)
			r := &renewer{real: f.cli, ttl: tc.ttl, err: tc.err, ids: make(chan clientv3.LeaseID, 1)}
			o := f.opts("fence-"+tc.name, 1, ttl, "")
			o.Group = "fence-" + tc.name
			o.Leases = r
			l := f.lock(o)
			if _, err := l.Acquire(ctx, "c1", nil); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Release(context.Background()) })
			if n := r.calls.Load(); n != 0 {
				t.Fatalf("the renewer was called %d time(s) before Fence", n)
			}
			err := l.Fence(ctx)
			if !tc.want(err) {
				t.Errorf("Fence = %v", err)
			}
			if n := r.calls.Load(); n != 1 {
				t.Fatalf("Fence renewed the node lease %d time(s), want 1", n)
			}
			want, err := l.LeaseID()
			if err != nil {
				t.Fatal(err)
			}
			if got := <-r.ids; got != want {
				t.Errorf("Fence renewed lease %x, want the node lease %x", got, want)
			}
		})
	}
}

func isNil(err error) bool { return err == nil }
func isErr(err error) bool { return err != nil }
