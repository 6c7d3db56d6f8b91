package etcdmember

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Options configure the adapter.
type Options struct {
	// LocalName is the local member's name; "" or "auto" finds it by what
	// the host is (MatchLocal): the member serving a local endpoint, or whose
	// peer or client URLs hold an own address or the host name.
	LocalName string
	// LocalEndpoints are client URLs served by this host's member, for
	// "auto". nil: the client's endpoints whose host is a loopback address.
	LocalEndpoints []string
	// LocalUnit is etcd.local_unit: set, this host runs a member, and
	// finding none is an error.
	LocalUnit string
	// LocalProcess is etcd.local_process, the member's process name where
	// no unit runs it (the kubelet's static pod): the same, its listeners
	// found by that name.
	LocalProcess string
	// Addrs lists the host's own addresses (nil: OwnAddrs); Hostname its
	// name (nil: os.Hostname). Tests inject them.
	Addrs    func() ([]HostAddr, error)
	Hostname func() (string, error)
	// LookupHost resolves a host name of the members' URLs (nil:
	// net.DefaultResolver, i.e. /etc/hosts and DNS as the host resolves).
	LookupHost func(ctx context.Context, name string) ([]netip.Addr, error)
	// ProcRoot is where the local member's listeners are read ("/proc").
	ProcRoot string
	// MaxLag is how many raft entries a member may trail and still count as
	// healthy (default 1000).
	MaxLag uint64
	// CallTimeout bounds each Status/MemberList call (default 2s).
	CallTimeout time.Duration
	// ConfirmTimeout bounds waiting for a moved leadership to show
	// (default 10s).
	ConfirmTimeout time.Duration
	Log            *slog.Logger
}

// Cluster reads the member list and health of the cluster cli talks to.
type Cluster struct {
	cli *clientv3.Client
	o   Options
	log *slog.Logger

	mu      sync.Mutex
	lastHow string // logged when it changes
}

// New returns the adapter; it does not talk to etcd yet.
func New(cli *clientv3.Client, o Options) *Cluster {
	if o.LocalName == "auto" {
		o.LocalName = ""
	}
	if o.MaxLag == 0 {
		o.MaxLag = 1000
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = 2 * time.Second
	}
	if o.ConfirmTimeout == 0 {
		o.ConfirmTimeout = 10 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Addrs == nil {
		o.Addrs = OwnAddrs
	}
	if o.Hostname == nil {
		o.Hostname = os.Hostname
	}
	if o.LookupHost == nil {
		o.LookupHost = LookupHost
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.LocalEndpoints == nil {
		for _, ep := range cli.Endpoints() {
			if isLoopback(ep) {
				o.LocalEndpoints = append(o.LocalEndpoints, ep)
			}
		}
	}
	return &Cluster{cli: cli, o: o, log: o.Log}
}

func isLoopback(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}

// MaxLag is the configured lag limit, for the pure rules.
func (c *Cluster) MaxLag() uint64 { return c.o.MaxLag }

// Members lists the members.
func (c *Cluster) Members(ctx context.Context) ([]Member, error) {
	ctx, cancel := context.WithTimeout(ctx, c.o.CallTimeout)
	defer cancel()
	resp, err := c.cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing etcd members: %w", err)
	}
	var out []Member
	for _, m := range resp.Members {
		out = append(out, Member{ID: m.ID, Name: m.Name, ClientURLs: m.ClientURLs, PeerURLs: m.PeerURLs, Learner: m.IsLearner})
	}
	return out, nil
}

// Local returns the local member; found is false when the host runs none.
// A host that looks like a member host but matches no member is an error,
// not "no member": a host whose member is missing must not be taken for a
// worker.
func (c *Cluster) Local(ctx context.Context) (m Member, found bool, err error) {
	match, err := c.LocalMatch(ctx)
	return match.Member, match.Found, err
}

// LocalMatch finds the local member and says how (MatchLocal), logging the
// how whenever it changes.
func (c *Cluster) LocalMatch(ctx context.Context) (Match, error) {
	members, err := c.Members(ctx)
	if err != nil {
		return Match{}, fmt.Errorf("finding the local etcd member: %w", err)
	}
	if c.o.LocalName != "" {
		for _, m := range members {
			if m.Name == c.o.LocalName {
				return Match{Member: m, Found: true, How: fmt.Sprintf("member %s: named by etcd.member", m.Name)}, nil
			}
		}
		return Match{}, fmt.Errorf("local etcd member %q is not in the member list", c.o.LocalName)
	}
	h, err := c.host(ctx, members)
	if err != nil {
		return Match{}, err
	}
	match, err := MatchLocal(members, h)
	if err != nil {
		return Match{}, fmt.Errorf("finding the local etcd member: %w", err)
	}
	c.mu.Lock()
	changed := match.How != c.lastHow
	c.lastHow = match.How
	c.mu.Unlock()
	if changed {
		c.log.Info("local etcd member", "how", match.How)
	}
	return match, nil
}

// host gathers what MatchLocal needs: own addresses, host name, the local
// unit's listeners, which member serves each local endpoint, and what the
// host names of the members' URLs resolve to.
func (c *Cluster) host(ctx context.Context, members []Member) (Host, error) {
	addrs, err := c.o.Addrs()
	if err != nil {
		return Host{}, fmt.Errorf("finding the local etcd member: %w", err)
	}
	name, err := c.o.Hostname()
	if err != nil {
		return Host{}, fmt.Errorf("finding the local etcd member: host name: %w", err)
	}
	h := Host{Addrs: addrs, Hostname: name, LocalUnit: c.o.LocalUnit, LocalProcess: c.o.LocalProcess}
	// Only more evidence: without it the addresses still decide.
	switch {
	case c.o.LocalUnit != "":
		if h.Listeners, err = UnitListeners(c.o.ProcRoot, c.o.LocalUnit); err != nil {
			c.log.Debug("not reading the etcd unit's listeners", "systemd_unit", c.o.LocalUnit, "err", err)
		}
	case c.o.LocalProcess != "":
		if h.Listeners, err = ProcessListeners(c.o.ProcRoot, c.o.LocalProcess); err != nil {
			c.log.Debug("not reading the etcd process's listeners", "process", c.o.LocalProcess, "err", err)
		}
	}
	for _, ep := range c.o.LocalEndpoints {
		st, err := c.status(ctx, ep)
		if err != nil {
			h.ServeErrs = append(h.ServeErrs, err)
			continue
		}
		h.Served = append(h.Served, Served{Endpoint: ep, MemberID: st.Header.MemberId})
	}
	for _, name := range URLHostNames(members) {
		h.Resolved = append(h.Resolved, c.resolve(ctx, name))
	}
	return h, nil
}

// resolve looks name up under the call timeout.
func (c *Cluster) resolve(ctx context.Context, name string) Resolution {
	return Resolve(ctx, c.o.LookupHost, name, c.o.CallTimeout)
}

// LookupHost resolves name as this host does (/etc/hosts, then DNS): the
// default of Options.LookupHost.
func LookupHost(ctx context.Context, name string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", name)
}

// Resolve looks name up with lookup within timeout: every address, IPv4 and
// IPv6. No address is an error; FleetLock's member check resolves with it
// too, so both take a name the same way.
func Resolve(ctx context.Context, lookup func(context.Context, string) ([]netip.Addr, error), name string, timeout time.Duration) Resolution {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addrs, err := lookup(ctx, name)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	if err != nil {
		return Resolution{Name: name, Err: fmt.Errorf("resolving %s: %w", name, err)}
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap() // LookupNetIP answers IPv4 as IPv4-in-IPv6
	}
	return Resolution{Name: name, Addrs: addrs}
}

func (c *Cluster) status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, c.o.CallTimeout)
	defer cancel()
	st, err := c.cli.Status(ctx, endpoint)
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", endpoint, err)
	}
	return st, nil
}

// Health asks every member for its own status, in parallel.
func (c *Cluster) Health(ctx context.Context) (Health, error) {
	members, err := c.Members(ctx)
	if err != nil {
		return Health{}, err
	}
	out := make([]MemberHealth, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		out[i].Member = m
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.probe(ctx, &out[i])
		}()
	}
	wg.Wait()
	return Summarize(out), nil
}

func (c *Cluster) probe(ctx context.Context, mh *MemberHealth) {
	if len(mh.ClientURLs) == 0 {
		mh.Err = "no client URL (not started yet)"
		return
	}
	var last error
	for _, ep := range mh.ClientURLs {
		st, err := c.status(ctx, ep)
		if err != nil {
			last = err
			continue
		}
		if st.Header.MemberId != mh.ID {
			last = fmt.Errorf("%s is served by member %x, not %x", ep, st.Header.MemberId, mh.ID)
			continue
		}
		mh.Reachable, mh.Err = true, ""
		mh.RaftIndex, mh.RaftTerm, mh.Leader = st.RaftIndex, st.RaftTerm, st.Leader
		mh.Alarms = st.Errors
		return
	}
	mh.Err = last.Error()
}

// QuorumSafeWithout checks the cluster now: may the member name go down?
func (c *Cluster) QuorumSafeWithout(ctx context.Context, name string) (bool, string, error) {
	h, err := c.Health(ctx)
	if err != nil {
		return false, "", err
	}
	ok, why := QuorumSafeWithout(h, name, c.o.MaxLag)
	return ok, why, nil
}

// MoveLeaderAway hands leadership from the local member (when it leads) to
// the best follower, preferring followers prefer says are already updated.
// The request goes to the leader's own endpoint (only the leader can
// transfer), and the move is confirmed by the new leader's own status. It
// returns the member leading afterwards.
func (c *Cluster) MoveLeaderAway(ctx context.Context, prefer func(memberName string) bool) (Member, error) {
	local, found, err := c.Local(ctx)
	if err != nil {
		return Member{}, err
	}
	if !found {
		return Member{}, errors.New("moving etcd leadership: this host runs no etcd member")
	}
	h, err := c.Health(ctx)
	if err != nil {
		return Member{}, err
	}
	lead, ok := h.Leader()
	if !ok {
		return Member{}, errors.New("moving etcd leadership: etcd has no leader")
	}
	if lead.ID != local.ID {
		return lead.Member, nil
	}
	to, ok := PickTransferee(h, local.Name, c.o.MaxLag, prefer)
	if !ok {
		return Member{}, fmt.Errorf("moving etcd leadership away from %s: no healthy follower", local.Name)
	}
	if err := c.moveLeader(ctx, lead, to); err != nil {
		return Member{}, err
	}
	c.log.Info("moved etcd leadership", "from_member", local.Name, "to_member", to.Name)
	return to.Member, nil
}

func (c *Cluster) moveLeader(ctx context.Context, from, to MemberHealth) error {
	var last error
	for _, ep := range from.ClientURLs {
		conn, err := c.cli.Dial(ep)
		if err != nil {
			last = err
			continue
		}
		mctx, cancel := context.WithTimeout(ctx, c.o.ConfirmTimeout)
		_, err = pb.NewMaintenanceClient(conn).MoveLeader(mctx, &pb.MoveLeaderRequest{TargetID: to.ID})
		cancel()
		conn.Close()
		if err != nil {
			last = err
			continue
		}
		return c.confirmLeader(ctx, to)
	}
	return fmt.Errorf("moving etcd leadership from %s to %s: %w", from.Name, to.Name, last)
}

// confirmLeader waits until to reports itself as leader.
func (c *Cluster) confirmLeader(ctx context.Context, to MemberHealth) error {
	ctx, cancel := context.WithTimeout(ctx, c.o.ConfirmTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, ep := range to.ClientURLs {
			if st, err := c.status(ctx, ep); err == nil && st.Leader == to.ID && st.Header.MemberId == to.ID {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("confirming %s leads after MoveLeader: %w", to.Name, ctx.Err())
		case <-tick.C:
		}
	}
}
