package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
)

// Daemon is the part of rpm-ostree the settler asks (*rpmostree.Client).
type Daemon interface {
	Status(ctx context.Context) (*rpmostree.Status, error)
	// Cancel is `rpm-ostree cancel`: it returns once the transaction is gone.
	Cancel(ctx context.Context) error
}

// Defaults of Settler.
const (
	DefaultBound = 5 * time.Minute
	DefaultPoll  = 5 * time.Second
	// cancelTimeout bounds one `rpm-ostree cancel` (a cancelled pull
	// stops within seconds).
	cancelTimeout = 2 * time.Minute
)

// Settler clears the way for a staging attempt (Settle), at start (Recover),
// and records the agent's own staging transactions (Begin).
type Settler struct {
	Daemon Daemon
	// Dir is the agent's state directory (the record lives there).
	Dir string
	// Bound is how long Settle waits for somebody else's transaction (0:
	// not at all); Poll how often it looks meanwhile.
	Bound time.Duration
	Poll  time.Duration
	Clock clockwork.Clock
	// BootID returns the current boot's ID (default: the kernel's).
	BootID func() (string, error)
	Log    *slog.Logger
}

func (s *Settler) clock() clockwork.Clock {
	if s.Clock == nil {
		return clockwork.NewRealClock()
	}
	return s.Clock
}

func (s *Settler) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

func (s *Settler) bootID() string {
	f := s.BootID
	if f == nil {
		f = func() (string, error) { return state.ReadBootID(state.BootIDPath) }
	}
	id, err := f()
	if err != nil {
		s.log().Warn("staging transaction record checked without a boot ID", "err", err)
	}
	return id
}

// Settle returns once rpm-ostreed runs no transaction: an earlier agent
// process's is cancelled, somebody else's waited for up to Bound. Still
// busy then, it returns an error wrapping rpmostree.ErrBusy (the attempt
// is not a failure of the update: retry later).
func (s *Settler) Settle(ctx context.Context) error {
	return s.settle(ctx, s.Bound)
}

// Recover is the start-up half: an earlier agent process's transaction is
// cancelled, a stale record removed; somebody else's transaction is left
// alone (logged) without waiting.
func (s *Settler) Recover(ctx context.Context) error {
	err := s.settle(ctx, 0)
	if errors.Is(err, rpmostree.ErrBusy) {
		s.log().Info("rpm-ostree runs a transaction the agent did not start; staging will wait for it", "err", err)
		return nil
	}
	return err
}

func (s *Settler) settle(ctx context.Context, bound time.Duration) error {
	clk := s.clock()
	start := clk.Now()
	boot := s.bootID()
	waiting := false
	for {
		st, err := s.Daemon.Status(ctx)
		if err != nil {
			return fmt.Errorf("looking for a running rpm-ostree transaction: %w", err)
		}
		rec, err := loadRecord(s.Dir)
		if err != nil {
			// What it said is unknown: never cancel on a guess.
			s.log().Warn("ignoring an unreadable staging transaction record", "err", err)
			rec = nil
			_ = removeRecord(s.Dir)
		}
		in := Input{Active: st.Transaction, Record: rec, BootID: boot, Waited: clk.Since(start), Bound: bound}
		if rec != nil {
			in.RecordLive = alive(rec.PID)
		}
		d := Decide(in)
		if d.Forget {
			if err := removeRecord(s.Dir); err != nil {
				return err
			}
		}
		switch d.Kind {
		case Go:
			if waiting {
				s.log().Info("rpm-ostree's transaction ended; staging goes on", "waited", clk.Since(start).Round(time.Second).String())
			}
			return nil
		case Cancel:
			s.log().Warn(d.Reason, "method", st.Transaction.Method, "sender", st.Transaction.Sender)
			cctx, cancel := context.WithTimeout(ctx, cancelTimeout)
			err := s.Daemon.Cancel(cctx)
			cancel()
			if err != nil {
				return fmt.Errorf("cancelling an earlier agent process's rpm-ostree transaction: %w", rpmostree.Marked(rpmostree.ErrBusy, err))
			}
			// Cancelled: whatever runs next is not that one.
			if err := removeRecord(s.Dir); err != nil {
				return err
			}
		case Wait:
			if !waiting {
				s.log().Info(d.Reason, "method", st.Transaction.Method, "sender", st.Transaction.Sender)
				waiting = true
			}
			poll := s.Poll
			if poll <= 0 {
				poll = DefaultPoll
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for rpm-ostree's transaction to end: %w", ctx.Err())
			case <-clk.After(min(poll, bound-in.Waited)):
			}
		case Busy:
			return fmt.Errorf("%s: %w", d.Reason, rpmostree.ErrBusy)
		}
	}
}

// Begin records that this process is about to run the staging command
// argv; the returned end removes the record once the command has ended.
func (s *Settler) Begin(argv []string) (end func(), err error) {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("recording the staging transaction: %w", err)
	}
	r := Record{BootID: s.bootID(), PID: os.Getpid(), Method: MethodOf(argv), Argv: argv, Started: s.clock().Now()}
	if err := saveRecord(s.Dir, r); err != nil {
		return nil, err
	}
	return func() {
		if err := removeRecord(s.Dir); err != nil {
			s.log().Warn("the next start takes a running staging transaction for this process's", "err", err)
		}
	}, nil
}

// alive reports whether pid is another running process. This process's own
// record is of an attempt that has ended: it stages one at a time.
func alive(pid int) bool {
	if pid <= 0 || pid == os.Getpid() {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
