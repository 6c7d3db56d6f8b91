package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/bootc"
	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/stage"
	"github.com/update-agent/update-agent/agent/systemd"
)

// backendProbeTimeout bounds the local bootc calls that choose the backend
// (no network: status and --version read the host only).
const backendProbeTimeout = 30 * time.Second

// chosenBackend is updates.backend resolved on this host.
type chosenBackend struct {
	Name, Reason string
	Bootc        *bootc.Client  // set for bootc
	Version      *bootc.Version // bootc's, when it was asked
	Host         *bootc.Host    // bootc's status, when it was read
}

func newBootcClient(cfg *config.Config, log *slog.Logger) *bootc.Client {
	return &bootc.Client{Path: cfg.Agent.Bootc, Runner: oplog.Runner{Log: log, Interrupt: syscall.SIGTERM}}
}

// chooseBackend resolves updates.backend (bootc.Choose) and refuses a bootc
// too old for --download-only.
func chooseBackend(ctx context.Context, cfg *config.Config, log *slog.Logger) (chosenBackend, error) {
	ctx, cancel := context.WithTimeout(ctx, backendProbeTimeout)
	defer cancel()
	c := newBootcClient(cfg, log)
	var p bootc.Probe
	if _, err := os.Stat(cfg.Agent.Bootc); err == nil {
		p.Installed = true
		if cfg.Updates.Backend == config.BackendAuto {
			p.Host, p.Err = c.Status(ctx)
		}
	}
	name, reason, err := bootc.Choose(cfg.Updates.Backend, cfg.Updates.Source, p)
	if err != nil {
		return chosenBackend{}, err
	}
	ch := chosenBackend{Name: name, Reason: reason, Host: p.Host}
	if name != config.BackendBootc {
		return ch, nil
	}
	v, err := c.Version(ctx)
	if err != nil {
		return ch, fmt.Errorf("updates.backend bootc: %w", err)
	}
	ch.Version = &v
	if err := bootc.RequireDownloadOnly(v); err != nil {
		return ch, err
	}
	ch.Bootc = c
	return ch, nil
}

// bootcPorts are the engine's OS and Stager over bootc. Staging takes the
// [staging] policy as rpm-ostree's does, but bootc has no daemon: the
// staging unit is the writer, so no daemon unit gets a drop-in. The
// latency baseline keeper and the live pacing board are the daemon's (one
// per process).
func bootcPorts(cfg *config.Config, root, stateDir string, c *bootc.Client, rpm *rpmostree.Client,
	keeper *guard.Keeper, board *guard.Board, log *slog.Logger) (adapters.BootcOS, *adapters.BootcStager) {
	o := stageOptions(cfg, root, stateDir, rpm, log)
	o.DaemonUnit, o.Environment, o.OKExitStatuses = "", nil, nil
	o.Guard.Board = board
	if keeper != nil {
		o.Baseline = keeper
	}
	runner := oplog.Runner{Log: log}
	s := &adapters.BootcStager{
		Client: c,
		Make: func(ctx context.Context) (*stage.Stager, error) {
			conn, err := systemd.Dial(context.WithoutCancel(ctx))
			if err != nil {
				return nil, err
			}
			s, err := stage.New(o, stage.Deps{Systemd: conn, Runner: runner})
			if err != nil {
				conn.Close()
				return nil, configError{err}
			}
			return s, nil
		},
	}
	return adapters.BootcOS{Client: c, RpmOstree: rpm, ApplyWait: adapters.DefaultApplyWait}, s
}

// wireBackend sets the engine's OS and Stager ports from the chosen
// backend: rpm-ostree's (a.os, a.stager) or bootc's.
func (a *agent) wireBackend(client *rpmostree.Client) error {
	ch, err := chooseBackend(context.Background(), a.cfg, a.log)
	if err != nil {
		// A bootc too old, or one whose status or version cannot be read,
		// does not change by restarting every RestartSec: exit 78 so
		// systemd stops, with the reason, until the host or
		// updates.backend is fixed.
		return configError{err}
	}
	a.backend = ch
	a.log.Info("update backend", "backend", ch.Name, "reason", ch.Reason)
	a.osPort, a.stagerPort = a.os, a.stager
	if ch.Bootc != nil {
		bos, bst := bootcPorts(a.cfg, a.root, a.stateDir, ch.Bootc, client, a.baseline, a.live, a.log)
		bst.Done = a.stager.Done
		a.osPort, a.stagerPort = bos, bst
	}
	return nil
}

// registerDriver registers the agent as rpm-ostree's update driver, so a
// manual `rpm-ostree upgrade` is refused, where rpm-ostree is installed (an
// image-mode host may lack it; bootc has no such registration).
func (a *agent) registerDriver(ctx context.Context) error {
	if a.backend.Name == config.BackendBootc {
		if _, err := os.Stat(a.cfg.Agent.RPMOstree); err != nil {
			return nil
		}
	}
	return a.os.RegisterDriver(ctx, driverName, a.log)
}

var _ engine.OS = adapters.BootcOS{}

// describeBackend is doctor's line: the backend, why, and for bootc its
// version and what it shows booted and staged.
func describeBackend(ctx context.Context, cfg *config.Config, log *slog.Logger) (string, error) {
	ch, err := chooseBackend(ctx, cfg, log)
	if err != nil {
		return "", err
	}
	s := ch.Name + ": " + ch.Reason
	if ch.Bootc == nil {
		return s, nil
	}
	s += fmt.Sprintf("; bootc %s", ch.Version)
	h := ch.Host
	if h == nil {
		if h, err = ch.Bootc.Status(ctx); err != nil {
			return "", err
		}
	}
	if !h.Managed() {
		return "", fmt.Errorf("%s, but bootc status shows no booted container image", s)
	}
	s += fmt.Sprintf(", follows %s, booted %s", h.Spec.Image, h.Status.Booted.Digest())
	if st := h.Status.Staged; st != nil {
		s += fmt.Sprintf(", staged %s (download-only %v)", st.Digest(), st.DownloadOnly)
	}
	return s, nil
}
