package fleetlock

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/jonboulle/clockwork"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/lock"
)

// DefaultQueueHold is how long a waiting client keeps its place without
// asking again: three of zincati's 5-minute refresh periods.
const DefaultQueueHold = 15 * time.Minute

// requestTimeout bounds the etcd work of one request.
const requestTimeout = 10 * time.Second

// maxBody bounds a request body; a real one is under 100 bytes.
const maxBody = 64 << 10

// Metrics counts requests by endpoint and answer kind.
type Metrics interface {
	FleetLockRequest(endpoint, kind string)
}

// Options configure a server.
type Options struct {
	Prefix string   // lock.key_prefix
	Groups []string // groups served; others get unknown_group
	Slots  int      // lock.slots: the agents' slot count
	// GroupSlots are the slot counts of served groups that are not the
	// agents' (zincati-only groups); a group not in it has Slots. Every
	// server of a group must be given the same count.
	GroupSlots map[string]int
	// TTL is each entry's lease TTL (lock.reboot_lease_ttl): how long
	// entries outlive the last server. Whole seconds.
	TTL     time.Duration
	MaxHold time.Duration // fleetlock.max_hold
	// MinInterval is lock.min_interval: a client's turn waits this long
	// after the group's previous release, and its steady-state starts the
	// wait for the next (0: no spacing).
	MinInterval time.Duration
	// QueueHold: see DefaultQueueHold (zero: the default).
	QueueHold time.Duration
	// Tick is the tending period (zero: a third of TTL, at most 30s).
	Tick time.Duration
	// Allow is the allow-list of each group (fleetlock.allow_ids,
	// allow_networks); a group without one admits every client.
	Allow map[string]Allow
	// MaxWaiters bounds the FleetLock clients waiting in a group
	// (fleetlock.max_waiters): a new client beyond it gets KindQueueFull
	// and no lease (0: no bound).
	MaxWaiters int
	// Rate limits the requests of each client address (zero: DefaultRate);
	// a request beyond it gets KindRateLimited before any etcd work.
	Rate Rate
	// LookupHost resolves the host names of the members' URLs for the
	// member check (nil: etcdmember.LookupHost, as the agent's own check).
	LookupHost func(ctx context.Context, name string) ([]netip.Addr, error)
	// Proxies are fleetlock.proxies: a request from one is not taken for
	// the member on its host (see MemberAddr).
	Proxies []netip.Addr
	// LocalMember, when set, serves this host's own zincati as its etcd
	// member (fleetlock.serve_local_member, local.go); nil refuses it as
	// any member.
	LocalMember *LocalMember
	Clock       clockwork.Clock // nil: the real clock
	Log         *slog.Logger
	Metrics     Metrics // may be nil
}

// Server answers FleetLock requests from the semaphore in etcd.
type Server struct {
	o       Options
	sem     *semaphore
	log     *slog.Logger
	limit   *limiter
	members memberCache
}

// New checks o and returns a server; nothing is written to etcd yet.
func New(cli *clientv3.Client, o Options) (*Server, error) {
	switch {
	case len(o.Groups) == 0:
		return nil, errors.New("fleetlock: no group to serve")
	case o.Slots < 1:
		return nil, fmt.Errorf("fleetlock: slots %d: must be at least 1", o.Slots)
	case o.TTL < time.Second || o.TTL%time.Second != 0:
		return nil, fmt.Errorf("fleetlock: lease TTL %v: must be whole seconds", o.TTL)
	case o.MaxHold <= 0:
		return nil, fmt.Errorf("fleetlock: max_hold %v: must be > 0", o.MaxHold)
	case o.MinInterval < 0:
		return nil, fmt.Errorf("fleetlock: min_interval %v: must not be negative", o.MinInterval)
	case o.MaxWaiters < 0:
		return nil, fmt.Errorf("fleetlock: max_waiters %d: must not be negative", o.MaxWaiters)
	case o.Rate != (Rate{}) && (o.Rate.Burst < 1 || o.Rate.Every <= 0):
		return nil, fmt.Errorf("fleetlock: rate %+v: needs a burst of at least 1 and a period > 0", o.Rate)
	case o.LocalMember != nil && (o.LocalMember.NodeID == "" || o.LocalMember.Cluster == nil):
		return nil, errors.New("fleetlock: serving the local member needs this host's zincati id and its cluster")
	}
	for g, n := range o.GroupSlots {
		if n < 1 || !slices.Contains(o.Groups, g) {
			return nil, fmt.Errorf("fleetlock: group %s: %d slot(s): must be a served group with at least 1", g, n)
		}
	}
	if o.QueueHold <= 0 {
		o.QueueHold = DefaultQueueHold
	}
	if o.Tick <= 0 {
		o.Tick = min(o.TTL/3, 30*time.Second)
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Rate == (Rate{}) {
		o.Rate = DefaultRate
	}
	if o.LookupHost == nil {
		o.LookupHost = etcdmember.LookupHost
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	log := o.Log.With("component", "fleetlock")
	return &Server{o: o, log: log, limit: &limiter{rate: o.Rate}, sem: &semaphore{cli: cli, prefix: o.Prefix, slots: o.Slots, groupSlots: o.GroupSlots, ttl: o.TTL,
		maxHold: o.MaxHold, queueHold: o.QueueHold, minInterval: o.MinInterval, maxWaiters: o.MaxWaiters,
		clock: o.Clock, log: log}}, nil
}

func (s *Server) served(group string) bool { return slices.Contains(s.o.Groups, group) }

// ServeHTTP answers <base>/v1/pre-reboot and <base>/v1/steady-state.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	endpoint := endpointLabel(r.URL.Path)
	e := s.handle(w, r, endpoint)
	kind := KindOK
	if e != nil {
		kind = e.Kind
	}
	if s.o.Metrics != nil {
		s.o.Metrics.FleetLockRequest(endpoint, string(kind))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(kind.Status())
	if e != nil {
		json.NewEncoder(w).Encode(e)
	}
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request, endpoint string) *Error {
	if endpoint == "other" {
		return errorf(KindNotFound, "no such endpoint %q; FleetLock serves %s and %s", r.URL.Path, PathPreReboot, PathSteadyState)
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return errorf(KindInvalidRequest, "reading body: %v", err)
	}
	p, perr := Parse(r.Method, r.Header.Get(HeaderName), raw, s.served)
	if perr != nil {
		s.log.Debug("FleetLock request refused", "endpoint", endpoint, "kind", perr.Kind, "reason", perr.Value,
			"remote", r.RemoteAddr)
		return perr
	}
	c := ClientOf(r)
	if !s.limit.allow(c.Addr, s.o.Clock.Now()) {
		s.log.Debug("FleetLock request refused: rate limit", "endpoint", endpoint, "id", p.ID, "client", c.String())
		return errorf(KindRateLimited, "too many requests from %s: at most %d at once and one every %v after",
			c.Addr, s.o.Rate.Burst, s.o.Rate.Every)
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	if endpoint == "steady-state" {
		if err := s.steadyState(ctx, p, c); err != nil {
			if e, ok := errors.AsType[*Error](err); ok {
				return e
			}
			s.log.Error("FleetLock unlock failed", "id", p.ID, "group", p.Group, "err", err)
			return errorf(KindFailedUnlock, "releasing the slot: %v", err)
		}
		return nil
	}
	member, e := s.admit(ctx, p, c)
	if e != nil {
		return e
	}
	if member != "" {
		return s.preRebootLocal(ctx, p, c, member)
	}
	pos, found, spacing, err := s.sem.lock(ctx, p, c)
	if err != nil {
		return s.lockError(p, err)
	}
	return Answer(pos, found, p.Group, spacing)
}

// steadyState releases the client's slot; this host's own zincati's
// member slot too, once its member is healthy.
func (s *Server) steadyState(ctx context.Context, p Params, c Client) error {
	if s.o.LocalMember != nil {
		if ok, _ := LocalClient(s.o.LocalMember.NodeID, p.ID, c, s.o.Proxies); ok {
			member, e := s.localMember(ctx, p, c)
			if e != nil {
				return e
			}
			return s.steadyStateLocal(ctx, p, c, member)
		}
	}
	return s.sem.unlock(ctx, p, c)
}

// lockError is the answer to a failed lock.
func (s *Server) lockError(p Params, err error) *Error {
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	s.log.Error("FleetLock lock failed", "id", p.ID, "group", p.Group, "err", err)
	return errorf(KindFailedLock, "taking a slot: %v", err)
}

// tended are the groups whose FleetLock entries this server keeps: the
// served ones, and the member slot when it serves the local member.
func (s *Server) tended() []string {
	if s.o.LocalMember == nil {
		return s.o.Groups
	}
	return append(slices.Clip(s.o.Groups), lock.MembersGroup)
}

// TendOnce keeps the wanted FleetLock entries alive and drops the others.
func (s *Server) TendOnce(ctx context.Context) error {
	var errs []error
	for _, g := range s.tended() {
		errs = append(errs, s.sem.tend(ctx, g), s.sem.recordGroup(ctx, g))
	}
	return errors.Join(errs...)
}

// Tend runs TendOnce every Tick until ctx ends. Every serving process runs
// it; keepalives from several are harmless.
func (s *Server) Tend(ctx context.Context) {
	t := s.o.Clock.NewTicker(s.o.Tick)
	defer t.Stop()
	for {
		tctx, cancel := context.WithTimeout(ctx, s.o.Tick)
		if err := s.TendOnce(tctx); err != nil && ctx.Err() == nil {
			s.log.Warn("tending FleetLock entries", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}

// Serve tends the entries and answers requests on ln (with tlsConf when
// not nil) until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener, tlsConf *tls.Config) error {
	if tlsConf != nil {
		ln = tls.NewListener(ln, tlsConf)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	tctx, stopTending := context.WithCancel(ctx)
	defer stopTending()
	go s.Tend(tctx)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	s.log.Info("serving FleetLock", "addr", ln.Addr().String(), "tls", tlsConf != nil,
		"groups", s.o.Groups, "slots", s.o.Slots, "max_hold", s.o.MaxHold, "max_waiters", s.o.MaxWaiters)
	if tlsConf == nil && !Loopback(ln.Addr().String()) {
		s.log.Warn("FLEETLOCK SERVED OVER PLAIN HTTP ON A NON-LOOPBACK ADDRESS: anyone on the network can "+
			"read and forge requests; a slot is bound only to the address that took it. Set fleetlock.cert_file "+
			"and key_file (workers trust its CA) and fleetlock.allow_networks (the workers' addresses), or listen on loopback", "addr", ln.Addr().String())
	}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving FleetLock: %w", err)
	}
	return nil
}

// TLSConfig loads the server certificate and, when clientCAFile is set,
// requires client certificates signed by it.
func TLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the FleetLock server certificate: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("loading the FleetLock client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("loading the FleetLock client CA: no certificate in %s", clientCAFile)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// Loopback says whether listen ("host:port") is reachable from this host
// only. An empty host, a wildcard or a name other than localhost is not.
func Loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
