package gates

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/etcdtest"
)

// A member with a small backend quota, written full, raises a real NOSPACE
// alarm: the gate holds; once the space is compacted, defragmented and the
// alarm disarmed (what an operator does), it lets the node go.
func TestNOSPACEAlarmHoldsUntilDisarmed(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1, QuotaBackendBytes: 1 << 20})
	cli := c.Client(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	check := func() (bool, string) {
		alarms, err := Alarms(ctx, cli)
		return Holding(Evaluate(Inputs{AlarmsEnabled: true, Alarms: alarms, AlarmsErr: err}))
	}
	if hold, why := check(); hold {
		t.Fatalf("fresh cluster holds: %s", why)
	}

	rev := etcdtest.FillBackend(t, ctx, cli)
	hold, why := check()
	if !hold || !strings.Contains(why, "NOSPACE on m0") {
		t.Fatalf("NOSPACE must hold the reboot: %v %q", hold, why)
	}

	etcdtest.FreeAndDisarm(t, ctx, cli, c.Members[0].ClientURL, rev)
	if hold, why := check(); hold {
		t.Fatalf("disarmed alarm still holds: %s", why)
	}
}

func TestSpacingMarkerFromEtcd(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli := c.Client(t, nil)
	ctx := context.Background()
	const prefix, group = "/update-agent/lock", "cp"

	s, err := ReadSpacing(ctx, cli, prefix, group)
	if err != nil || s.Active {
		t.Fatalf("no release yet: %+v %v", s, err)
	}
	if err := MarkReleased(ctx, cli, prefix, group, "cp1", 0); err != nil {
		t.Fatal(err)
	}
	if s, _ := ReadSpacing(ctx, cli, prefix, group); s.Active {
		t.Fatal("min_interval 0 must record nothing")
	}
	if err := MarkReleased(ctx, cli, prefix, group, "cp1", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	s, err = ReadSpacing(ctx, cli, prefix, group)
	if err != nil || !s.Active || s.By != "cp1" || s.Left <= 0 || s.Left > 2*time.Second {
		t.Fatalf("right after the release: %+v %v", s, err)
	}
	if other, _ := ReadSpacing(ctx, cli, prefix, "workers"); other.Active {
		t.Fatal("another group's reboot is not spaced by this one")
	}
	// etcd expires the marker: poll, bounded, for the lease to run out.
	deadline := time.Now().Add(15 * time.Second)
	for {
		s, err = ReadSpacing(ctx, cli, prefix, group)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("marker never expired: %+v", s)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
