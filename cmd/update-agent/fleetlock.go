package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/control"
	"github.com/update-agent/update-agent/agent/etcdclient"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/fleetlock"
	"github.com/update-agent/update-agent/agent/graph"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/logging"
	"github.com/update-agent/update-agent/agent/metrics"
	"github.com/update-agent/update-agent/agent/sdnotify"
)

// runFleetLock is `update-agent fleetlock serve`: the FleetLock server
// alone, for a host that runs no agent (the daemon serves it too when
// fleetlock.listen is set).
func runFleetLock(env *cmdEnv, args []string) error {
	if len(args) > 0 && isHelp(args[0]) {
		printVerbs(env.stdout, "fleetlock")
		return nil
	}
	if len(args) == 0 || args[0] != "serve" {
		return usageError{"fleetlock: expected 'serve'"}
	}
	fs := newFlags(env, "fleetlock serve")
	root := fs.String("root", "/", "prefix for every configuration path (tests)")
	debug := fs.Bool("debug", false, "log debug messages")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := logging.New(env.stderr, level)
	cfg, src, err := loadConfig(*root)
	for _, w := range src.Warnings {
		log.Warn("configuration", "warning", w)
	}
	if err != nil {
		return err
	}
	if cfg.FleetLock.Listen == "" {
		return configError{errors.New("fleetlock.listen is not set: nothing to serve")}
	}
	cli, err := etcdclient.New(etcdClientOptions(cfg, *root))
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	m := metrics.New(version)
	if err := serveMetrics(ctx, cfg, *root, m, log); err != nil {
		return err
	}
	s, ln, err := listenFleetLock(cfg, *root, cli, m, log)
	if err != nil {
		return err
	}
	// Type=notify: the unit is started once the port is bound, so units
	// ordered after it find FleetLock answering.
	var notify sdnotify.Notifier
	if err := notify.Ready("serving FleetLock on " + ln.Addr().String()); err != nil {
		log.Warn("telling systemd we are ready", "err", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s(ctx, ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		// SIGTERM: systemd shows "deactivating" while open requests finish.
		_ = notify.Stopping()
		log.Info("FleetLock server stopping", "reason", fmt.Sprint(context.Cause(ctx)))
		return <-errc
	}
}

// listenFleetLock binds fleetlock.listen (so a taken port fails the
// start) and returns the server to run on it.
func listenFleetLock(cfg *config.Config, root string, cli *clientv3.Client, m *metrics.Metrics, log *slog.Logger) (
	func(context.Context, net.Listener) error, net.Listener, error) {
	f := cfg.FleetLock
	nets, err := f.Networks()
	if err != nil {
		return nil, nil, configError{err}
	}
	proxies, err := f.ProxyAddrs()
	if err != nil {
		return nil, nil, configError{err}
	}
	groups, slots := []string{cfg.Lock.Group}, map[string]int{}
	allow := map[string]fleetlock.Allow{cfg.Lock.Group: {IDs: f.AllowIDs, Networks: nets}}
	for _, g := range f.Groups {
		gnets, err := g.Networks()
		if err != nil {
			return nil, nil, configError{err}
		}
		groups = append(groups, g.Name)
		slots[g.Name] = g.Slots
		allow[g.Name] = fleetlock.Allow{IDs: g.AllowIDs, Networks: gnets}
	}
	local, err := localMember(cfg, root, cli, log)
	if err != nil {
		return nil, nil, err
	}
	s, err := fleetlock.New(cli, fleetlock.Options{
		Prefix: cfg.Lock.KeyPrefix, Groups: groups, Slots: cfg.Lock.Slots, GroupSlots: slots,
		TTL: cfg.Lock.RebootLeaseTTL.D(), MaxHold: f.MaxHold.D(), MinInterval: cfg.Lock.MinInterval.D(),
		MaxWaiters: f.MaxWaiters,
		Allow:      allow, Proxies: proxies, LocalMember: local,
		Log: log, Metrics: m,
	})
	if err != nil {
		return nil, nil, configError{err}
	}
	var serve func(context.Context, net.Listener) error
	if f.CertFile == "" {
		serve = func(ctx context.Context, ln net.Listener) error { return s.Serve(ctx, ln, nil) }
	} else {
		tc, err := fleetlock.TLSConfig(rooted(root, f.CertFile), rooted(root, f.KeyFile), rooted(root, f.ClientCAFile))
		if err != nil {
			// A file that turned bad after check-config is still a
			// configuration error: exit 78, systemd does not restart.
			return nil, nil, configError{err}
		}
		serve = func(ctx context.Context, ln net.Listener) error { return s.Serve(ctx, ln, tc) }
	}
	ln, err := net.Listen("tcp", f.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("FleetLock (fleetlock.listen = %q): %w", f.Listen, err)
	}
	return serve, ln, nil
}

// localMember is what fleetlock.serve_local_member needs: this host's
// zincati id (zincati's derivation from /etc/machine-id, as the graph
// source's node_uuid) and the member checks the agent makes for itself.
func localMember(cfg *config.Config, root string, cli *clientv3.Client, log *slog.Logger) (*fleetlock.LocalMember, error) {
	if !cfg.FleetLock.ServeLocalMember {
		return nil, nil
	}
	b, err := os.ReadFile(rooted(root, lock.MachineIDPath))
	id := ""
	if err == nil {
		id, err = graph.NodeUUID(string(b))
	}
	if err != nil {
		return nil, fmt.Errorf("fleetlock.serve_local_member: this host's zincati id: %w", err)
	}
	mo := memberOptions(cfg, log)
	if memberHost != nil {
		memberHost(&mo)
	}
	member := etcdmember.New(cli, mo)
	return &fleetlock.LocalMember{NodeID: id, Cluster: member, Policy: memberPolicy(cfg, member.MaxLag())}, nil
}

// serveFleetLock starts the daemon's FleetLock server when configured; it
// stops when ctx ends.
func (a *agent) serveFleetLock(ctx context.Context) error {
	if a.cfg.FleetLock.Listen == "" {
		return nil
	}
	cli := a.etcd
	if cli == nil { // lock.enabled = false: the agent made no client
		c, err := etcdclient.New(etcdClientOptions(a.cfg, a.root))
		if err != nil {
			return err
		}
		context.AfterFunc(ctx, func() { c.Close() })
		cli = c
	}
	serve, ln, err := listenFleetLock(a.cfg, a.root, cli, a.metrics, a.log)
	if err != nil {
		return err
	}
	go func() {
		if err := serve(ctx, ln); err != nil {
			a.log.Error("FleetLock server stopped", "err", err)
		}
	}()
	return nil
}

// serveMetrics serves metrics.listen for the standalone server, as the
// daemon does.
func serveMetrics(ctx context.Context, cfg *config.Config, root string, m *metrics.Metrics, log *slog.Logger) error {
	addr := cfg.Metrics.Listen
	if addr == "" {
		return nil
	}
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		addr = "unix:" + rooted(root, p)
	}
	ln, err := control.Listen(addr)
	if err != nil {
		return fmt.Errorf("metrics (metrics.listen = %q): %w", cfg.Metrics.Listen, err)
	}
	go func() {
		if err := m.Serve(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("metrics endpoint stopped", "err", err)
		}
	}()
	return nil
}
