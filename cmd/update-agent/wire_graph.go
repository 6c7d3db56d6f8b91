package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/graph"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
)

// deadEndMOTD is where the dead-end notice goes (beside the reboot notice).
const deadEndMOTD = "/run/motd.d/85-update-agent-deadend"

// newGraphSource builds the update-graph source of [cincinnati] and
// [identity]; what the configuration leaves "" is read from the host.
func newGraphSource(cfg *config.Config, root string, log *slog.Logger) *graph.Source {
	id := cfg.Identity
	gid := graph.Identity{Group: id.Group, Stream: id.Stream, Basearch: id.Basearch, Platform: id.Platform,
		NodeUUID: strings.ToLower(strings.ReplaceAll(id.NodeUUID, "-", "")), Wariness: float64(id.RolloutWariness)}
	if gid.NodeUUID == "" {
		b, err := os.ReadFile(rooted(root, "/etc/machine-id"))
		if err == nil {
			gid.NodeUUID, err = graph.NodeUUID(string(b))
		}
		if err != nil {
			log.Warn("update graph: no node_uuid sent (the server places the node in rollouts at random); set identity.node_uuid", "err", err)
		}
	}
	if gid.Platform == "" {
		if b, err := os.ReadFile(rooted(root, "/proc/cmdline")); err == nil {
			gid.Platform = graph.Platform(string(b))
		}
	}
	return &graph.Source{
		Client:   &graph.Client{BaseURL: cfg.Cincinnati.BaseURL},
		Identity: gid,
		Policy:   graph.Policy{AllowDowngrade: cfg.Updates.AllowDowngrade},
		Notice:   graph.MOTD{File: rooted(root, deadEndMOTD)},
		Log:      log.With("source", "graph"),
		Override: rooted(root, rpmostree.BootedOverrideFile),
	}
}

// updateSourceProbe is doctor's line for updates.source.
type updateSourceProbe struct {
	cfg    *config.Config
	root   string
	client *rpmostree.Client
	log    *slog.Logger
}

func (p updateSourceProbe) Check(ctx context.Context) (string, error) {
	switch p.cfg.Updates.Source {
	case config.SourceGraph:
		st, err := p.client.Status(ctx)
		if err != nil {
			return "", err
		}
		src := newGraphSource(p.cfg, p.root, p.log)
		src.Notice = nil // doctor only looks
		return src.Probe(ctx, st)
	case config.SourceImage:
		return "image " + p.cfg.Updates.Image + " (rebase; follows the tag, not an update graph)", nil
	}
	return p.cfg.Updates.Source + " (rpm-ostree upgrade --check: follows the ref, not an update graph)", nil
}

// graphLines are status's lines on the update graph: where the booted
// release stands, and a dead end said out loud.
func graphLines(line func(k, format string, a ...any), g *graph.Report, now time.Time) {
	switch {
	case g == nil:
		return
	case !g.Reachable:
		line("Update graph", "%s unreachable (%s): %s", g.BaseURL, ago(g.At, now), g.Error)
	case g.Error != "":
		line("Update graph", "%s (%s): %s", g.BaseURL, ago(g.At, now), g.Error)
	case !g.InGraph:
		line("Update graph", "%s (%s): no update: %s", g.BaseURL, ago(g.At, now), g.Why)
	default:
		line("Update graph", "booted %s (age_index %d) in stream %s, %d releases (%s): %s", g.BootedVersion, g.AgeIndex, g.Stream, g.Nodes, ago(g.At, now), g.Why)
	}
	if g.DeadEnd {
		line("Dead end", "booted release %s is a dead end: %s; no update leaves it, move the node by hand", g.BootedVersion, g.DeadEndReason)
	}
}

// graphTarget asks the update graph once (stage-once): the release to
// stage, or why there is none.
func graphTarget(ctx context.Context, cfg *config.Config, root string, client *rpmostree.Client, log *slog.Logger) (*state.Target, string, error) {
	st, err := client.Status(ctx)
	if err != nil {
		return nil, "", err
	}
	src := newGraphSource(cfg, root, log)
	src.Notice = nil // the daemon keeps the notice
	t, err := src.Check(ctx, st)
	if err != nil {
		return nil, "", err
	}
	return t, src.Last().Why, nil
}
