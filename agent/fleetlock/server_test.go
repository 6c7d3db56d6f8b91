package fleetlock_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/fleetlock"
	"github.com/update-agent/update-agent/agent/lock"
)

// TestProtocol follows zincati's protocol document against a real etcd:
// recursive lock, unlock-if-held, the semaphore full, and the refusals.
func TestProtocol(t *testing.T) {
	f := newFixture(t, 1)
	ctx := ctxT(t, 20*time.Second)
	o := f.opts(1)
	m := o.Metrics.(*counts)
	_, hs := f.server(o)
	pre, steady := fleetlock.PathPreReboot, fleetlock.PathSteadyState

	// Initialization: unlocking what is not held succeeds.
	if a := post(t, hs.URL, steady, "a", "default"); !a.ok() {
		t.Fatalf("steady-state with nothing held: %+v", a)
	}
	if a := post(t, hs.URL, pre, "a", "default"); !a.ok() {
		t.Fatalf("first pre-reboot: %+v", a)
	}
	// Recursive: the holder asking again still holds.
	if a := post(t, hs.URL, pre, "a", "default"); !a.ok() {
		t.Fatalf("second pre-reboot of the holder: %+v", a)
	}
	a := post(t, hs.URL, pre, "b", "default")
	if a.Status != http.StatusConflict || a.Kind != "failed_lock_semaphore_full" {
		t.Fatalf("pre-reboot with the slot taken: %+v", a)
	}
	holders, waiters := f.queue(ctx, 1)
	if got := names(holders); !slices.Equal(got, []string{"fleetlock:a"}) || holders[0].Kind != lock.KindFleetLock ||
		holders[0].AcquiredAt.IsZero() {
		t.Fatalf("holders %+v, want FleetLock client a, granted", holders)
	}
	if got := names(waiters); !slices.Equal(got, []string{"fleetlock:b"}) || !waiters[0].AcquiredAt.IsZero() {
		t.Fatalf("waiters %+v, want FleetLock client b", waiters)
	}
	// Owned: b's steady-state only drops b's own place in line.
	if a := post(t, hs.URL, steady, "b", "default"); !a.ok() {
		t.Fatalf("steady-state of a waiter: %+v", a)
	}
	if h, w := f.queue(ctx, 1); len(h) != 1 || len(w) != 0 {
		t.Fatalf("after b left: holders %v waiters %v", names(h), names(w))
	}
	leaseA := clientv3.LeaseID(0)
	if resp, err := f.cli.Get(ctx, lock.HoldersPrefix(prefix, "default")+"fleetlock:a"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reading a's entry: %v", err)
	} else {
		leaseA = clientv3.LeaseID(resp.Kvs[0].Lease)
	}
	for range 2 {
		if a := post(t, hs.URL, steady, "a", "default"); !a.ok() {
			t.Fatalf("steady-state of the holder: %+v", a)
		}
	}
	if h, w := f.queue(ctx, 1); len(h)+len(w) != 0 {
		t.Fatalf("after a released: holders %v waiters %v", names(h), names(w))
	}
	if ttl, err := f.cli.TimeToLive(ctx, leaseA); err != nil || ttl.TTL != -1 {
		t.Errorf("a's lease after release: %+v, %v; want revoked", ttl, err)
	}
	if a := post(t, hs.URL, pre, "b", "default"); !a.ok() {
		t.Fatalf("b after a released: %+v", a)
	}

	hdr := map[string]string{"fleet-lock-protocol": "true"}
	good := []byte(`{"client_params":{"id":"c","group":"default"}}`)
	for _, tc := range []struct {
		name   string
		path   string
		header map[string]string
		body   string
		status int
		kind   string
	}{
		{"missing header", pre, nil, string(good), 400, "missing_header"},
		{"header false", steady, map[string]string{"fleet-lock-protocol": "false"}, string(good), 400, "missing_header"},
		{"empty id", pre, hdr, `{"client_params":{"id":"","group":"default"}}`, 400, "invalid_client_identity"},
		{"id with slash", steady, hdr, `{"client_params":{"id":"../x","group":"default"}}`, 400, "invalid_client_identity"},
		{"bad group", pre, hdr, `{"client_params":{"id":"c","group":"a b"}}`, 400, "invalid_group"},
		{"unknown group", pre, hdr, `{"client_params":{"id":"c","group":"workers"}}`, 404, "unknown_group"},
		{"no params", pre, hdr, `{}`, 400, "invalid_request"},
		{"not json", pre, hdr, `nope`, 400, "invalid_request"},
		{"wrong path", "/v1/reboot", hdr, string(good), 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := postRaw(t, hs.URL+tc.path, tc.header, []byte(tc.body))
			if a.Status != tc.status || a.Kind != tc.kind {
				t.Fatalf("got %d %s (%s), want %d %s", a.Status, a.Kind, a.Value, tc.status, tc.kind)
			}
		})
	}
	resp, err := http.Get(hs.URL + pre)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", resp.StatusCode)
	}
	if h, w := f.queue(ctx, 1); !slices.Equal(names(h), []string{"fleetlock:b"}) || len(w) != 0 {
		t.Errorf("refused requests changed the queue: holders %v waiters %v", names(h), names(w))
	}
	for k, want := range map[string]int{"pre-reboot ok": 3, "pre-reboot failed_lock_semaphore_full": 1,
		"steady-state ok": 4, "pre-reboot missing_header": 1, "other not_found": 1, "pre-reboot method_not_allowed": 1} {
		if got := m.get(k); got != want {
			t.Errorf("metric %q = %d, want %d", k, got, want)
		}
	}
	logs := f.buf.String()
	for _, want := range []string{`msg="FleetLock slot granted" component=fleetlock id=a group=default`, `msg="FleetLock slot released" component=fleetlock id=a group=default`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q", want)
		}
	}
}
