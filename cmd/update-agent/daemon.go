package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/update-agent/update-agent/agent/control"
	"github.com/update-agent/update-agent/agent/logging"
	"github.com/update-agent/update-agent/agent/sdnotify"
	"github.com/update-agent/update-agent/agent/stage"
)

// firstStatusTimeout bounds the wait for rpm-ostree at start (rpm-ostreed
// may still be starting at boot); well inside systemd's start timeout.
const firstStatusTimeout = 60 * time.Second

// driverName is what the agent registers as rpm-ostree's update driver.
const driverName = "update-agent"

func runDaemon(env *cmdEnv, args []string) error {
	fs := newFlags(env, "daemon")
	root := fs.String("root", "/", "prefix for every configuration and state path (tests)")
	debug := fs.Bool("debug", false, "log debug messages")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := logging.New(env.stderr, level)
	slog.SetDefault(log)

	cfg, src, err := loadConfig(*root)
	for _, w := range src.Warnings {
		log.Warn("configuration", "warning", w)
	}
	for _, d := range src.Derived {
		log.Info("configuration default from the host", "default", d)
	}
	if err != nil {
		return err
	}
	log.Info("configuration loaded", "fragments", src.Fragments, "masked", src.Masked,
		"lock_group", cfg.Lock.Group, "reboot_strategy", cfg.Reboot.Strategy)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var notify sdnotify.Notifier
	log.Info("update-agent starting", "version", version, "root", *root, "pid", os.Getpid())

	// lastBeat moves while the main loop makes progress; the watchdog pings
	// only while it moves, so a wedged loop gets the agent restarted.
	var lastBeat atomic.Int64
	beat := func() { lastBeat.Store(time.Now().UnixNano()) }
	beat()
	status := func(s string) {
		if err := notify.Status(s); err != nil {
			log.Debug("telling systemd our status", "err", err)
		}
	}

	a, err := wire(cfg, *root, log, status, beat)
	if err != nil {
		return err
	}
	defer a.close()

	// Before rpm-ostree is asked anything: a killed predecessor may have
	// left rpm-ostreed frozen, and then status would never answer.
	stage.RecoverAtStart(ctx, a.log, a.stagerPort.Recover)
	// In companion mode another updater drives the host: bootc's or
	// zincati's is expected, not fenced off.
	if a.companion == nil {
		if err := a.fenceOwners(ctx); err != nil {
			return err
		}
	}
	// Without the lock, only on a worker (after the recovery: undoing a
	// killed staging is safe anywhere).
	if a.lockOff != nil {
		if err := a.lockOff.Check(ctx); err != nil {
			return err
		}
	}
	// status answers from here on: until the OS status is read, with what
	// the daemon starts on, not with "is it running?".
	a.setStarting("waiting for " + a.backend.Name)
	serveCtx, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	if err := a.serveControl(serveCtx); err != nil {
		return err
	}
	first, err := a.firstStatus(ctx, firstStatusTimeout)
	if err != nil {
		return err
	}
	if a.companion != nil {
		a.log.Info("companion mode: not registering as rpm-ostree's update driver; another updater drives this host")
	} else if err := a.registerDriver(ctx); err != nil {
		return err
	}

	a.setStarting("")
	if err := a.serve(serveCtx); err != nil {
		return err
	}
	if k := a.baseline; k != nil {
		go k.Run(serveCtx) // normal, learned while no staging runs
	}

	if err := notify.Ready("started; " + describe(first)); err != nil {
		log.Warn("telling systemd we are ready", "err", err)
	}
	wd := sdnotify.WatchdogInterval()
	go notify.PingWhile(ctx, wd, func() bool {
		return time.Since(time.Unix(0, lastBeat.Load())) < 4*wd
	})

	// The engine persists every step before taking it; on SIGTERM its
	// running action is cancelled (staging: SIGINT to rpm-ostree, units
	// thawed, policy undone) and the next start resumes from the record.
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	companionDone := make(chan struct{})
	if a.companion != nil {
		go func() { defer close(companionDone); a.companion.run(runCtx) }()
	} else {
		close(companionDone)
		go a.watchOwners(runCtx, stopRun)
	}
	runErr := a.engine.Run(runCtx)
	cause := context.Cause(runCtx)
	stopRun(nil)
	<-companionDone // its window undone before the process ends
	notify.Stopping()
	log.Info("update-agent stopping", "reason", fmt.Sprint(cause), "err", runErr)
	if runErr == nil && isForeignUpdater(cause) {
		return cause
	}
	return runErr
}

// serve starts, when configured, the FleetLock server and the metrics
// endpoint. They stop when ctx ends.
func (a *agent) serve(ctx context.Context) error {
	if err := a.serveFleetLock(ctx); err != nil {
		return err
	}
	return serveMetrics(ctx, a.cfg, a.root, a.metrics, a.log)
}

// serveControl starts the control socket (status, update-now) until ctx
// ends.
func (a *agent) serveControl(ctx context.Context) error {
	ln, err := control.ListenUnix(rooted(a.root, control.DefaultSocket))
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	srv := &control.Server{
		Status:    func(ctx context.Context) (any, error) { return a.report(ctx), nil },
		UpdateNow: a.engine.UpdateNow,
		Log:       a.log,
	}
	go func() {
		if err := srv.Serve(ctx, ln); err != nil {
			a.log.Error("control socket stopped", "err", err)
		}
	}()
	return nil
}

// startingState is what the daemon starts on, for status.
type startingState struct {
	What  string
	Since time.Time
}

// setStarting says what the daemon waits for before its engine runs; ""
// once it runs.
func (a *agent) setStarting(what string) {
	if what == "" {
		a.starting.Store(nil)
		return
	}
	a.starting.Store(&startingState{What: what, Since: time.Now()})
}
