package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/logging"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/stage"
	"github.com/update-agent/update-agent/agent/state"
)

// runStageOnce stages one update now, under the configured staging policy
// and latency guard, and exits: no lock, no reboot (the deployment stays
// locked for finalization). For operators who want the update staged
// ahead of a maintenance window, and for the guest end-to-end tests.
func runStageOnce(env *cmdEnv, args []string) error {
	fs := newFlags(env, "stage-once")
	root := fs.String("root", "/", "prefix for the configuration and state directories (tests)")
	deploy := fs.String("deploy", "", "stage this commit (rpm-ostree deploy revision=) instead of upgrading (or, with updates.source = \"graph\", the graph's release)")
	rebase := fs.String("rebase", "", "rebase to this refspec or container image instead of upgrading")
	debug := fs.Bool("debug", false, "log debug messages (every latency guard decision)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (pprof)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	req := rpmostree.StageRequest{Kind: rpmostree.StageUpgrade}
	switch {
	case *deploy != "" && *rebase != "":
		return usageError{"stage-once: --deploy and --rebase exclude each other"}
	case *deploy != "":
		req = rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: *deploy}
	case *rebase != "":
		req = rpmostree.StageRequest{Kind: rpmostree.StageRebase, Ref: *rebase}
	}
	if err := req.Validate(); err != nil {
		return usageError{"stage-once: " + err.Error()}
	}
	cfg, _, err := loadConfig(*root)
	if err != nil {
		return err
	}
	req.AllowDowngrade = cfg.Updates.AllowDowngrade
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := logging.New(env.stderr, level)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	client := newClient(cfg, log)
	var target *state.Target
	if req.Kind == rpmostree.StageUpgrade && cfg.Updates.Source == config.SourceGraph {
		// The graph's release, exactly: never what the ref points at now.
		t, why, err := graphTarget(ctx, cfg, *root, client, log)
		if err != nil {
			return err
		}
		if t == nil {
			fmt.Fprintf(env.stdout, "nothing to stage: %s\n", why)
			return nil
		}
		target = t
	}
	s := newOnceStager(cfg, *root, client, log)
	// Before anything asks rpm-ostree (building the command does not; the
	// daemon-idle check does): a killed run may have left rpm-ostreed frozen.
	stage.RecoverAtStart(ctx, log, s.Recover)
	var rep stage.Report
	what, label := "staged", req.String()
	if target != nil {
		// The daemon's staging, checks and all (the graph's stream): a
		// check of its own here would drift from the daemon's.
		label = fmt.Sprintf("release %s (%s)", target.Version, target.Checksum)
		rep, err = s.StageOnce(ctx, *target)
		if errors.Is(err, adapters.ErrNothingStaged) {
			what, err = "nothing new to stage", nil
		}
	} else if rep, err = s.Run(ctx, req); rep.Unit.ExecMainStatus == rpmostree.ExitUnchanged {
		what = "nothing new to stage"
	}
	if err != nil {
		what = "failed"
	}
	fmt.Fprintf(env.stdout, "%s: %s in %.1fs (setup %.1fs) on %v; guard: %v, %d freezes, %.1fs frozen, %d forced thaws; baseline: %s; write rate %.1f MB/s at the end, %d cuts\n",
		label, what, rep.Duration.Seconds(), rep.Setup.Seconds(), rep.Disks, rep.Guarded, rep.Guard.Freezes, rep.Guard.Frozen.Seconds(), rep.Guard.ForcedThaws,
		rep.Baseline, float64(rep.Guard.Rate)/1e6, rep.Guard.RateCuts)
	return err
}

// onceStager is how stage-once stages: Run a request as it is, or
// StageOnce the graph's release as the daemon stages it.
type onceStager interface {
	Recover(ctx context.Context) error
	Run(ctx context.Context, req rpmostree.StageRequest) (stage.Report, error)
	StageOnce(ctx context.Context, t state.Target) (stage.Report, error)
}

// newOnceStager is the daemon's stager (newStager); tests swap in one
// that needs no systemd.
var newOnceStager = func(cfg *config.Config, root string, client *rpmostree.Client, log *slog.Logger) onceStager {
	s, _ := newStager(cfg, root, rooted(root, cfg.Agent.StateDir), client, nil, log)
	return s
}

// startCPUProfile profiles the process until the returned stop: the bench
// asks for it to tell where the guard's CPU in the guest goes.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting the CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
