package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/etcdclient"
	"github.com/update-agent/update-agent/agent/etcdmember"
)

// memberNoLock: lock.enabled = false on a host that runs an etcd member.
// It maps to exitMemberNoLock, which systemd does not restart: only a
// configuration change fixes it.
type memberNoLock struct{ err error }

func (e memberNoLock) Error() string { return e.err.Error() }
func (e memberNoLock) Unwrap() error { return e.err }

// lockOff is how an agent without the lock makes sure that this host runs
// no etcd member: config.CheckDaemon refuses a member the configuration
// names; with etcd.member = "auto" only the host can tell (its etcd
// process, listeners on etcd's ports, and the cluster's member list when
// etcd.endpoints are set).
type lockOff struct {
	cfg      *config.Config
	procRoot string
	cli      *clientv3.Client    // nil without etcd.endpoints
	cluster  *etcdmember.Cluster // nil without etcd.endpoints
	log      *slog.Logger
}

// newLockOff builds the check; it talks to nothing yet.
func newLockOff(cfg *config.Config, root string, log *slog.Logger) (*lockOff, error) {
	l := &lockOff{cfg: cfg, procRoot: procRoot(root), log: log}
	if len(cfg.Etcd.Endpoints) > 0 {
		cli, err := etcdclient.New(etcdClientOptions(cfg, root))
		if err != nil {
			return nil, fmt.Errorf("setting up the etcd client to look for a local member: %w", err)
		}
		l.cli = cli
		l.cluster = etcdmember.New(cli, memberOptions(cfg, log))
	}
	return l, nil
}

// procRoot is where the host's processes and sockets are read: a test tree
// under --root may bring its own /proc (with net/tcp), else the host's.
func procRoot(root string) string {
	if p := rooted(root, "/proc"); p != "/proc" {
		if _, err := os.Stat(filepath.Join(p, "net", "tcp")); err == nil {
			return p
		}
	}
	return "/proc"
}

// Check is nil on a worker, memberNoLock on a member's host, and another
// error when the host could not be read or the cluster not asked: unsure
// is not a worker.
func (l *lockOff) Check(ctx context.Context) error {
	v, why := etcdmember.JudgeLockOff(etcdmember.LookSigns(ctx, l.procRoot, l.cluster, l.cfg.Etcd.Endpoints))
	switch v {
	case etcdmember.LockOffWorker:
		l.log.Debug("lock.enabled = false on a worker", "why", why)
		return nil
	case etcdmember.LockOffMember:
		return memberNoLock{l.cfg.LockOffRefused(why)}
	default:
		return fmt.Errorf("checking that this host runs no etcd member: %w", l.cfg.LockOffRefused(why))
	}
}

func (l *lockOff) close() {
	if l.cli != nil {
		l.cli.Close()
	}
}

// lockOffLock is the engine's lock when locking is disabled: always
// granted, but every acquisition, adoption and fence checks again that the
// host runs no etcd member (a worker may become one while the agent runs);
// an error holds the reboot.
type lockOffLock struct {
	engine.NoLock
	check func(context.Context) error
}

func (l lockOffLock) Acquire(ctx context.Context, _ string) (int64, error) {
	return 0, l.check(ctx)
}

func (l lockOffLock) Adopt(ctx context.Context) (engine.LeaseState, error) {
	if err := l.check(ctx); err != nil {
		return engine.LeaseGone, err
	}
	return engine.LeaseHolding, nil
}

func (l lockOffLock) Fence(ctx context.Context) error { return l.check(ctx) }
