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

	"github.com/update-agent/update-agent/agent/logging"
	"github.com/update-agent/update-agent/agent/sdnotify"
)

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
	if err != nil {
		return err
	}
	log.Info("configuration loaded", "fragments", src.Fragments, "masked", src.Masked,
		"lock_group", cfg.Lock.Group, "reboot_strategy", cfg.Reboot.Strategy)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var notify sdnotify.Notifier
	log.Info("update-agent starting", "version", version, "root", *root, "pid", os.Getpid())
	if err := notify.Ready("idle"); err != nil {
		log.Warn("telling systemd we are ready", "err", err)
	}

	// lastBeat is updated by the main loop; the watchdog pings only while it
	// moves, so a wedged loop gets the agent restarted.
	var lastBeat atomic.Int64
	beat := func() { lastBeat.Store(time.Now().UnixNano()) }
	beat()
	wd := sdnotify.WatchdogInterval()
	go notify.PingWhile(ctx, wd, func() bool {
		return time.Since(time.Unix(0, lastBeat.Load())) < 4*wd
	})

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			notify.Stopping()
			log.Info("update-agent stopping", "reason", fmt.Sprint(context.Cause(ctx)))
			return nil
		case <-tick.C:
			beat()
		}
	}
}
