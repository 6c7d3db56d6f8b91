package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/update-agent/update-agent/agent/control"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/gates"
	"github.com/update-agent/update-agent/agent/graph"
	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/state"
)

// statusReport is what `update-agent status` shows: everything that says
// why this node has not rebooted yet, on one screen.
type statusReport struct {
	Node     string `json:"node"`
	Version  string `json:"version"`
	Strategy string `json:"reboot_strategy"`
	// Starting is what the daemon waits for before its engine runs
	// ("waiting for rpm-ostree"); the engine's fields are empty meanwhile.
	Starting      string                `json:"starting,omitempty"`
	StartingSince time.Time             `json:"starting_since,omitzero"`
	Backend       string                `json:"backend,omitempty"`
	Engine        engine.Snapshot       `json:"engine"`
	Lock          *lockReport           `json:"lock,omitempty"`
	Etcd          *etcdReport           `json:"etcd,omitempty"`
	Staging       *engine.StagingReport `json:"last_staging,omitempty"`
	// Window is the staging window open now: its pacing, the brake and
	// etcd's WAL latency against its baseline.
	Window *guard.Live `json:"window,omitempty"`
	// Gates is the reboot gates' last evaluation (while holding a slot).
	Gates *gatesReport `json:"gates,omitempty"`
	// Graph is the last update-graph check (updates.source = "graph").
	Graph *graph.Report `json:"graph,omitempty"`
}

type gatesReport struct {
	At      time.Time      `json:"at"`
	Results []gates.Result `json:"results"`
}

type lockReport struct {
	Group string `json:"group"`
	Slots int    `json:"slots"`
	// Position is where this node stood when it last waited for a slot.
	Position *engine.QueuePosition `json:"position,omitempty"`
	Holders  []lock.EntryStatus    `json:"holders"`
	Waiters  []lock.EntryStatus    `json:"waiters"`
	Pending  []lock.Announcement   `json:"pending"`
	Error    string                `json:"error,omitempty"`
}

type etcdReport struct {
	LocalMember string   `json:"local_member,omitempty"`
	Leader      string   `json:"leader,omitempty"`
	Problems    []string `json:"problems,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// report gathers the status; etcd is asked live, with a short timeout, so
// that a slow cluster does not hang `status`.
func (a *agent) report(ctx context.Context) statusReport {
	if s := a.starting.Load(); s != nil {
		return statusReport{Node: a.node, Version: version, Strategy: a.cfg.Reboot.Strategy, Backend: a.backend.Name,
			Starting: s.What, StartingSince: s.Since}
	}
	snap := a.engine.Snapshot()
	r := statusReport{Node: a.node, Version: version, Strategy: a.cfg.Reboot.Strategy,
		Engine: snap, Staging: snap.LastStaging, Backend: a.backend.Name}
	if l, ok := a.live.Live(); ok {
		r.Window = &l
	}
	if a.gateLog != nil {
		if rs, at := a.gateLog.Last(); rs != nil {
			r.Gates = &gatesReport{At: at, Results: rs}
		}
	}
	if a.graph != nil {
		r.Graph = a.graph.Last()
	}
	if a.etcd == nil {
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	lr := &lockReport{Group: a.cfg.Lock.Group, Slots: a.cfg.Lock.Slots, Position: snap.Position}
	gs, err := lock.Status(ctx, a.etcd, a.cfg.Lock.KeyPrefix, a.cfg.Lock.Slots, a.cfg.Lock.Group, time.Now())
	if err != nil {
		lr.Error = err.Error()
	}
	for _, g := range gs {
		if g.Group == a.cfg.Lock.Group {
			lr.Holders, lr.Waiters, lr.Pending = g.Holders, g.Waiters, g.Pending
		}
	}
	r.Lock = lr
	er := &etcdReport{}
	if m, found, err := a.cluster.C.Local(ctx); err != nil {
		er.Error = err.Error()
	} else if found {
		er.LocalMember = m.Name
	}
	if h, err := a.cluster.C.Health(ctx); err != nil {
		er.Error = err.Error()
	} else {
		if l, ok := h.Leader(); ok {
			er.Leader = l.Name
		}
		er.Problems = problems(h, a.cluster.C.MaxLag())
	}
	r.Etcd = er
	return r
}

func problems(h etcdmember.Health, maxLag uint64) []string {
	var p []string
	for _, m := range h.Members {
		if s := h.Problem(m, maxLag); s != "" {
			p = append(p, m.Name+": "+s)
		}
	}
	return p
}

func runStatus(env *cmdEnv, args []string) error {
	fs := newFlags(env, "status")
	root := fs.String("root", "/", "prefix for the control socket's path (tests)")
	asJSON := fs.Bool("json", false, "print the daemon's answer as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	raw, err := control.Client{Socket: rooted(*root, control.DefaultSocket)}.Status(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := env.stdout.Write(raw)
		return err
	}
	var r statusReport
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("reading the daemon's status: %w", err)
	}
	printStatus(env.stdout, r, time.Now())
	return nil
}

// printStatus renders the report for a human: what the agent does, what it
// waits for, and everything that decides when it may reboot.
func printStatus(w io.Writer, r statusReport, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s:\t%s\n", k, fmt.Sprintf(format, a...)) }
	st, act := r.Engine.State, r.Engine.Action
	line("Node", "%s (update-agent %s)", r.Node, r.Version)
	if r.Starting != "" {
		line("State", "starting: %s since %s", r.Starting, ago(r.StartingSince, now))
		tw.Flush()
		return
	}
	line("State", "%s since %s", st.Phase, ago(st.Since, now))
	switch act.Kind {
	case engine.ActWait:
		line("Waiting for", "%s (until %s)", act.Reason, when(act.Until, now))
	case "":
	default:
		line("Doing", "%s", act.Reason)
	}
	if r.Engine.UpdateNow {
		line("Update-now", "requested, not yet acted on")
	}
	if r.Backend != "" {
		line("Backend", "%s", r.Backend)
	}
	line("Booted", "%s", dep(&r.Engine.OS.Booted))
	if s := r.Engine.OS.Staged; s != nil {
		lock := "NOT locked by the agent (any reboot would apply it)"
		if st.Locked != "" && st.Locked == s.Checksum {
			lock = "locked for finalization by the agent"
		}
		line("Staged", "%s, %s", dep(s), lock)
	} else {
		line("Staged", "none")
	}
	if st.Target.Checksum != "" && st.Phase != state.Idle {
		line("Target", "%s", dep(&engine.Deployment{Checksum: st.Target.Checksum, Version: st.Target.Version}))
	}
	graphLines(line, r.Graph, now)
	line("Reboot window", "%s", window(r, now))
	if l := r.Lock; l != nil {
		line("Reboot slot", "%s", slot(l, r.Node, st))
		for _, p := range l.Pending {
			who := p.Node
			if p.Member != "" {
				who += " (etcd member " + p.Member + ")"
			}
			line("Pending update", "%s: %s, announced %s", who, short(p.Target), ago(p.AnnouncedAt, now))
		}
	}
	if g := r.Gates; g != nil {
		for _, res := range g.Results {
			verdict := "open"
			if res.Hold {
				verdict = "HOLDS"
			}
			line("Reboot gate", "%s %s: %s (checked %s)", res.Gate, verdict, res.Reason, ago(g.At, now))
		}
	}
	if e := r.Etcd; e != nil {
		switch {
		case e.Error != "":
			line("etcd", "unreachable: %s", e.Error)
		default:
			role := "no local member"
			if e.LocalMember != "" {
				role = "local member " + e.LocalMember
				if e.LocalMember == e.Leader {
					role += " (the leader)"
				}
			}
			line("etcd", "leader %s; %s", orNone(e.Leader), role)
			for _, p := range e.Problems {
				line("etcd problem", "%s", p)
			}
		}
	}
	if l := r.Window; l != nil {
		line("Pacing now", "%s (window open since %s)", pacingNow(*l), ago(l.Since, now))
	}
	if s := r.Staging; s != nil {
		res := "ok"
		if !s.OK {
			res = "failed: " + s.Error
		}
		g := "guard off"
		if s.Guarded {
			g = fmt.Sprintf("guard: %d freezes, %.1fs frozen, %d forced thaws", s.Freezes, s.Frozen, s.ForcedThaws)
		}
		line("Last staging", "%s, %.0fs, %s (%s)", ago(s.At, now), s.Seconds, res, g)
		if s.Pacing != "" {
			line("Pacing", "%s", s.Pacing)
		}
	}
	if st.LastError != "" {
		line("Last error", "%s", st.LastError)
	}
	keys := make([]string, 0, len(st.Failures))
	for k := range st.Failures {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := st.Failures[k]
		what := fmt.Sprintf("retry %s", when(f.RetryAt, now))
		if f.SetAside {
			what = "SET ASIDE (update-now retries it)"
		}
		line("Failures", "%s: %d, %s; last: %s", short(k), f.Count, what, f.LastError)
	}
	tw.Flush()
}

func dep(d *engine.Deployment) string {
	if d.Version != "" {
		return fmt.Sprintf("%s (%s)", d.Version, short(d.Checksum))
	}
	return short(d.Checksum)
}

func window(r statusReport, now time.Time) string {
	if r.Strategy != "periodic" {
		return "any time (strategy " + r.Strategy + ")"
	}
	n := r.Engine.NextWindow
	if n.IsZero() {
		return "none configured"
	}
	if !n.After(now) {
		return "open now"
	}
	return "next opens " + when(n, now)
}

func slot(l *lockReport, node string, st state.State) string {
	if l.Error != "" {
		return "unknown: " + l.Error
	}
	var hs, ws []string
	for _, h := range l.Holders {
		hs = append(hs, fmt.Sprintf("%s (%s)", h.Node, h.Age.Round(time.Second)))
	}
	for _, w := range l.Waiters {
		ws = append(ws, w.Node)
	}
	s := fmt.Sprintf("group %s, %d slot(s); held by %s; waiting: %s", l.Group, l.Slots, orNone(strings.Join(hs, ", ")), orNone(strings.Join(ws, ", ")))
	for _, h := range l.Holders {
		if h.Node == node {
			return s + "; THIS NODE HOLDS A SLOT"
		}
	}
	if p := l.Position; p != nil && !p.Holder {
		s += fmt.Sprintf("; this node waits behind %d", p.Ahead)
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return fmt.Sprintf("%s (%s ago)", t.Local().Format("2006-01-02 15:04:05"), now.Sub(t).Round(time.Second))
}

func when(t, now time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	d := t.Sub(now).Round(time.Second)
	if d <= 0 {
		return t.Local().Format("2006-01-02 15:04:05") + " (now)"
	}
	return fmt.Sprintf("%s (in %s)", t.Local().Format("2006-01-02 15:04:05"), d)
}
