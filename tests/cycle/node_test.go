package cycle

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/engine"
	"github.com/update-agent/update-agent/agent/etcdclient"
	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/rpmostree"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/agent/txn"
)

// nodeEnv selects the node role: the test binary, started again with this
// variable set to a nodeSpec, runs one host's agent until killed or stopped
// (SIGTERM), so the rollout tests can SIGKILL agents for real.
const nodeEnv = "UA_CYCLE_NODE"

// nodeSpec is what one agent process needs to know about its host.
type nodeSpec struct {
	Name, Member, StateDir, BootID string
	RpmOstree                      string
	ClientEnv                      []string // the stand-in host's client environment
	Endpoints                      []string
	LogFile                        string
	// Hold keeps the reboot window closed: the node stages and waits.
	Hold bool
}

// closed is a reboot window that never opens.
type closed struct{}

func (closed) Contains(time.Time) bool    { return false }
func (closed) Next(t time.Time) time.Time { return t.Add(time.Hour) }

const (
	prefix   = "/update-agent/lock"
	group    = "control-plane"
	leaseTTL = 20 * time.Second
)

// runNode is the node role's main: the production engine with the real
// adapters, as the daemon wires them, against the stand-in host and the
// test's etcd cluster.
func runNode(specJSON string) int {
	var s nodeSpec
	if err := json.Unmarshal([]byte(specJSON), &s); err != nil {
		fmt.Fprintf(os.Stderr, "node role: %v\n", err)
		return 1
	}
	logf, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "node role: %v\n", err)
		return 1
	}
	defer logf.Close()
	log := slog.New(slog.NewTextHandler(logf, nil)).With("node", s.Name, "pid", os.Getpid())
	if err := runAgent(s, log); err != nil {
		log.Error("agent exited", "err", err)
		return 1
	}
	return 0
}

func runAgent(s nodeSpec, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cli, err := etcdclient.New(etcdclient.Options{Endpoints: s.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	client := &rpmostree.Client{Path: s.RpmOstree, Runner: oplog.Runner{Log: log, Env: s.ClientEnv, Interrupt: syscall.SIGINT}}
	member := etcdmember.New(cli, etcdmember.Options{LocalName: s.Member, Log: log})
	lk := &adapters.Lock{Node: s.Name, Make: func(ctx context.Context) (*lock.Lock, error) {
		return lock.New(cli, lock.Options{Prefix: prefix, Group: group, Slots: 1, TTL: leaseTTL,
			Node: s.Name, BootID: s.BootID, Member: s.Member, StateDir: s.StateDir, Log: log})
	}}
	// The lease (and the slot) outlive the agent: Close drops the session
	// without revoking.
	defer lk.Close()
	cl := &adapters.Cluster{C: member, Lock: lk, Policy: etcdmember.Policy{FollowersFirst: true, MoveLeader: true,
		RequireQuorum: true, MaxLag: member.MaxLag()}}
	// A kill mid-staging leaves the daemon's transaction running: the next
	// agent process cancels it (its record names it) before staging again.
	settler := &txn.Settler{Daemon: client, Dir: s.StateDir, Bound: 30 * time.Second, Log: log,
		BootID: func() (string, error) { return s.BootID, nil }}
	pol := engine.Policy{CheckInterval: 200 * time.Millisecond, Retry: engine.Backoff{Base: time.Second, Max: 5 * time.Second},
		MaxFailures: 10, MoveLeader: true, RequireSafe: true,
		RecheckInterval: 200 * time.Millisecond, RebootTimeout: time.Minute}
	if s.Hold {
		pol.Window = closed{}
	}
	eng := engine.New(engine.Options{
		OS: adapters.OS{Client: client}, Stager: adapters.PlainStager{Client: client, Txn: settler},
		Lock: lk, Cluster: cl, Store: state.Store{Dir: s.StateDir},
		BootID: func() (string, error) { return s.BootID, nil },
		Policy: pol,
		Log:    log, BeatInterval: time.Second,
	})
	log.Info("agent process started")
	return eng.Run(ctx)
}
