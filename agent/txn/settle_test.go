package txn

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/rpmostree"
)

// daemon is a fake rpm-ostreed at the unit boundary: its transaction ends
// after `ends` more status calls (-1: never), or when cancelled.
type daemon struct {
	mu       sync.Mutex
	txn      *rpmostree.Transaction
	ends     int
	statuses int
	cancels  int
}

func (d *daemon) Status(context.Context) (*rpmostree.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.statuses++
	if d.ends == 0 {
		d.txn = nil
	}
	d.ends--
	return &rpmostree.Status{Transaction: d.txn}, nil
}

func (d *daemon) Cancel(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cancels++
	d.txn = nil
	return nil
}

func settler(t *testing.T, d *daemon, clk clockwork.Clock) *Settler {
	return &Settler{Daemon: d, Dir: t.TempDir(), Bound: time.Minute, Poll: 10 * time.Second, Clock: clk,
		BootID: func() (string, error) { return "boot-1", nil }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// deadPID is the PID of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestSettleCancelsOurs: a record left by a process that is gone, naming
// the running Deploy: cancelled, record removed, no wait.
func TestSettleCancelsOurs(t *testing.T) {
	d := &daemon{txn: &rpmostree.Transaction{Method: "Deploy", Sender: ":1.9"}, ends: -1}
	s := settler(t, d, clockwork.NewFakeClock())
	if err := saveRecord(s.Dir, Record{BootID: "boot-1", PID: deadPID(t), Method: "Deploy"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, _ := loadRecord(s.Dir); d.cancels != 1 || r != nil {
		t.Errorf("cancels %d, record %+v; want one cancel and no record", d.cancels, r)
	}
}

// TestSettleWaitsForOthers: somebody else's transaction is never
// cancelled: waited for up to the bound (then busy), or until it ends.
func TestSettleWaitsForOthers(t *testing.T) {
	for _, c := range []struct {
		name string
		ends int
		busy bool
	}{{"still running after the bound", -1, true}, {"ends while waited for", 3, false}} {
		t.Run(c.name, func(t *testing.T) {
			d := &daemon{txn: &rpmostree.Transaction{Method: "PkgChange", Sender: ":1.77"}, ends: c.ends}
			clk := clockwork.NewFakeClock()
			s := settler(t, d, clk)
			done := make(chan error, 1)
			go func() { done <- s.Settle(context.Background()) }()
			var err error
		loop:
			for {
				select {
				case err = <-done:
					break loop
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				if clk.BlockUntilContext(ctx, 1) == nil {
					clk.Advance(10 * time.Second)
				}
				cancel()
			}
			if c.busy != errors.Is(err, rpmostree.ErrBusy) || !c.busy && err != nil {
				t.Fatalf("err = %v, want busy %v", err, c.busy)
			}
			if d.cancels != 0 {
				t.Error("somebody else's transaction was cancelled")
			}
			if want := 7; c.busy && d.statuses != want { // at 0, 10, ..., 60 s
				t.Errorf("%d status reads over the minute, want %d", d.statuses, want)
			}
		})
	}
}

// TestRecoverDoesNotWait: at start somebody else's transaction is left
// alone at once; a stale record (its transaction ended) is removed.
func TestRecoverDoesNotWait(t *testing.T) {
	d := &daemon{txn: &rpmostree.Transaction{Method: "PkgChange"}, ends: -1}
	s := settler(t, d, clockwork.NewFakeClock())
	if err := s.Recover(context.Background()); err != nil || d.cancels != 0 || d.statuses != 1 {
		t.Fatalf("err %v, cancels %d, statuses %d", err, d.cancels, d.statuses)
	}
	idle := &daemon{ends: -1}
	s = settler(t, idle, clockwork.NewFakeClock())
	if err := saveRecord(s.Dir, Record{BootID: "boot-1", PID: deadPID(t), Method: "Deploy"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, _ := loadRecord(s.Dir); r != nil {
		t.Errorf("stale record kept: %+v", r)
	}
}

// TestBeginRecordsThisProcess: Begin records this process and the method
// rpm-ostreed will show; end removes it; a record of this very process
// (an attempt that ended without end) is not a live one.
func TestBeginRecordsThisProcess(t *testing.T) {
	s := settler(t, &daemon{ends: -1}, clockwork.NewFakeClock())
	end, err := s.Begin([]string{"/usr/bin/rpm-ostree", "deploy", "--lock-finalization", "revision=abc"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := loadRecord(s.Dir)
	if err != nil || r == nil || r.Method != "Deploy" || r.BootID != "boot-1" || alive(r.PID) {
		t.Fatalf("record %+v (%v): want Deploy in boot-1, not live for this process", r, err)
	}
	end()
	if r, _ := loadRecord(s.Dir); r != nil {
		t.Errorf("record kept after end: %+v", r)
	}
}
