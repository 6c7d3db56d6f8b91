package adapters

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/update-agent/update-agent/agent/gates"
	"github.com/update-agent/update-agent/agent/logging"
	"github.com/update-agent/update-agent/agent/systemd"
)

// Gates is engine.Gates over agent/gates: every evaluation is logged, one
// line per gate with what it saw, so the journal tells why a node waits.
type Gates struct {
	C    *gates.Checker
	Node string
	Log  *slog.Logger
	// Seen, when set, keeps the last evaluation for `update-agent status`.
	Seen *GateLog
	// Metrics, when set, gets each evaluation (metrics.Metrics).
	Metrics GateMetrics
}

// GateMetrics takes, per gate, whether it held at the last evaluation.
type GateMetrics interface{ GatesHolding(map[string]bool) }

// GateLog is the gates' last evaluation and when it was made.
type GateLog struct {
	mu sync.Mutex
	at time.Time
	rs []gates.Result
}

// Last returns the last evaluation (nil before the first).
func (l *GateLog) Last() ([]gates.Result, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rs, l.at
}

func (l *GateLog) set(rs []gates.Result, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rs, l.at = rs, at
}

func (g Gates) Hold(ctx context.Context) (bool, string) {
	rs := g.C.Check(ctx)
	if g.Seen != nil {
		g.Seen.set(rs, time.Now())
	}
	if g.Metrics != nil {
		// Several commands share the gate "command": any holding holds.
		holding := map[string]bool{}
		for _, r := range rs {
			holding[r.Gate] = holding[r.Gate] || r.Hold
		}
		g.Metrics.GatesHolding(holding)
	}
	for _, r := range rs {
		level := slog.LevelInfo
		attrs := []any{"gate", r.Gate, "hold", r.Hold, "reason", r.Reason}
		if r.Hold {
			level = slog.LevelWarn
			attrs = append(attrs, logging.MessageID(logging.IDHeld))
		}
		g.Log.Log(ctx, level, "reboot gate", attrs...)
	}
	return gates.Holding(rs)
}

func (g Gates) Rebooted(ctx context.Context) error { return g.C.Released(ctx, g.Node) }

// Host is engine.Host: the people on the host (gates.Notifier) and
// systemd's verdict on the boot.
type Host struct {
	Notifier gates.Notifier
	Node     string
	// LoggedInDelay is only told in the message (the engine waits).
	LoggedInDelay time.Duration
	Log           *slog.Logger
	// BootComplete asks systemd (systemd.Conn.BootComplete); nil = always.
	BootDone func(ctx context.Context) (bool, error)
}

func (h Host) Announce(ctx context.Context, target string) error {
	msg := gates.Message(h.Node, target, h.LoggedInDelay)
	if h.Notifier.MOTDFile == "" && h.Notifier.Wall == "" {
		return nil // reboot.notify_users = false
	}
	if h.Log != nil {
		h.Log.Info("telling the people on the host", "motd", h.Notifier.MOTDFile, "notice", strings.TrimSpace(msg))
	}
	return h.Notifier.Announce(ctx, msg)
}

func (h Host) LoggedIn(ctx context.Context) (int, error) { return h.Notifier.LoggedIn(ctx) }

func (h Host) Unannounce() error { return h.Notifier.Clear() }

func (h Host) BootComplete(ctx context.Context) (bool, error) {
	if h.BootDone == nil {
		return true, nil
	}
	return h.BootDone(ctx)
}

// SystemdBootComplete is Host.BootDone on a host: systemd's own verdict
// (boot-complete.target reached), over a connection of its own.
func SystemdBootComplete(ctx context.Context) (bool, error) {
	conn, err := systemd.Dial(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	return conn.BootComplete(ctx)
}
