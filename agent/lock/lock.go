package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Options configure a node's view of the semaphore.
type Options struct {
	Prefix string // e.g. "/update-agent"
	Group  string // nodes that share the slots
	Slots  int
	// TTL is the reboot budget: how long a node may be gone (rebooting)
	// before its slot is given to the next node. Whole seconds.
	TTL    time.Duration
	Node   string // this node's name
	BootID string // /proc/sys/kernel/random/boot_id, recorded for operators
	Member string // this node's etcd member name, "" if it runs none
	// LocalMember, when set, looks this node's etcd member up ("" for
	// none) at every acquisition, adoption, announcement and fence: a node
	// may become a member (or stop being one) while the agent runs, and
	// the member slot must follow (see members.go). Member is then only
	// the starting point. An error holds the step.
	LocalMember func(ctx context.Context) (string, error)
	// MachineID tells this host from another one configured with the same
	// Node name; "" reads MachineIDPath.
	MachineID string
	// MachineIDPath is read when MachineID is empty; "" is /etc/machine-id.
	MachineIDPath string
	// StateDir keeps the node lease ID across the reboot.
	StateDir string
	// MinInterval is lock.min_interval: a release after this node
	// rebooted holding its slot leaves the group's spacing marker (see
	// spacing.go). 0: none.
	MinInterval time.Duration
	Log         *slog.Logger
	Now         func() time.Time // nil: time.Now
	// Leases renews the node lease in Fence; nil: the etcd client. Tests
	// inject one to see that the fence renews and checks what is left.
	Leases LeaseRenewer
}

// LeaseRenewer is the one lease call Fence makes itself (clientv3.Lease
// has it).
type LeaseRenewer interface {
	KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error)
}

func (o Options) validate() error {
	for _, f := range []struct{ name, v string }{{"group", o.Group}, {"node", o.Node}} {
		if f.v == "" || strings.Contains(f.v, "/") {
			return fmt.Errorf("lock %s %q: must be non-empty and contain no '/'", f.name, f.v)
		}
	}
	if o.Slots < 1 {
		return fmt.Errorf("lock slots %d: must be at least 1", o.Slots)
	}
	if o.TTL < time.Second || o.TTL > math.MaxInt32*time.Second {
		return fmt.Errorf("lock TTL %v: must be at least 1s", o.TTL)
	}
	if o.StateDir == "" {
		return errors.New("lock state directory not set")
	}
	if o.MinInterval < 0 {
		return fmt.Errorf("lock min interval %v: must not be negative", o.MinInterval)
	}
	return nil
}

var (
	// ErrLeaseExpired: the node lease ran out (agent gone longer than the
	// reboot budget, or etcd unreachable that long); slot and announcement
	// are gone.
	ErrLeaseExpired = errors.New("node lease expired: reboot slot and announcement lost")
	// ErrNotHolder: a fenced write found that this node does not hold a slot.
	ErrNotHolder = errors.New("this node does not hold a reboot slot")
	// ErrDequeued: the node's queue entry vanished while waiting (an operator
	// ran `update-agent lock release`, or the lease expired).
	ErrDequeued = errors.New("queue entry was removed while waiting")
	// ErrNodeNameConflict: a key of this node's name belongs to another
	// machine (see NameConflictError).
	ErrNodeNameConflict = errors.New("node name used by another machine")
)

// NameConflictError: two hosts run with one node name. The key is never
// adopted, moved or overwritten: each would think it holds the slot.
type NameConflictError struct {
	Key, Node, Theirs, Ours string
}

func (e *NameConflictError) Error() string {
	theirs := e.Theirs
	if theirs == "" {
		theirs = "unknown (no machine_id recorded, another lease)"
	}
	return fmt.Sprintf("node name %q is in use by another machine: %s belongs to machine %s, this is machine %s; "+
		"give each host its own agent.node_name", e.Node, e.Key, theirs, e.Ours)
}

func (e *NameConflictError) Is(target error) bool { return target == ErrNodeNameConflict }

// Lock is one node's handle on its group's semaphore.
type Lock struct {
	cli *clientv3.Client
	o   Options
	log *slog.Logger

	mu   sync.Mutex
	sess *concurrency.Session
	// heldRev is the CreateRevision of our key once it holds a slot; it
	// fences later writes.
	heldRev int64
	// heldBoot is the boot ID recorded in our key when it held: another
	// than this boot's means this node rebooted holding its slot, and its
	// release starts the group's spacing.
	heldBoot string

	// members is the cluster-wide member semaphore (MembersGroup, one
	// slot) an etcd member's node also holds; nil on a node without one.
	// It shares this lock's node lease: parent is set on it instead.
	// Guarded by mu: set again at each lookup of the local member.
	members *Lock
	parent  *Lock
	// memberLooked: Options.LocalMember answered once (a change is logged
	// from then on).
	memberLooked bool
}

// New checks o and returns a Lock; nothing is written to etcd yet.
func New(cli *clientv3.Client, o Options) (*Lock, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Leases == nil {
		o.Leases = cli
	}
	if o.MachineID == "" {
		if o.MachineIDPath == "" {
			o.MachineIDPath = MachineIDPath
		}
		id, err := ReadMachineID(o.MachineIDPath)
		if err != nil {
			return nil, err
		}
		o.MachineID = id
	}
	o.Prefix = strings.TrimRight(o.Prefix, "/")
	l := &Lock{cli: cli, o: o, log: o.Log.With("lock_group", o.Group, "node", o.Node)}
	l.setMember(o.Member)
	return l, nil
}

// newMembers is the member slot's handle for a node running member name.
func (l *Lock) newMembers(name string) *Lock {
	mo := l.o
	mo.Group, mo.Slots, mo.MinInterval, mo.Member, mo.LocalMember = MembersGroup, 1, 0, name, nil
	return &Lock{cli: l.cli, o: mo, log: l.o.Log.With("lock_group", MembersGroup, "node", l.o.Node), parent: l}
}

// Keys of a group, see doc.go.
func groupPrefix(prefix, group string) string { return prefix + "/" + group + "/" }
func holdersPrefix(prefix, group string) string {
	return groupPrefix(prefix, group) + "holders/"
}
func pendingPrefix(prefix, group string) string {
	return groupPrefix(prefix, group) + "pending/"
}

func (l *Lock) holderKey() string  { return holdersPrefix(l.o.Prefix, l.o.Group) + l.o.Node }
func (l *Lock) pendingKey() string { return pendingPrefix(l.o.Prefix, l.o.Group) + l.o.Node }

// session returns a live node lease: the running one, the one recorded in
// the state directory (re-adopted after a restart or reboot), or a new one.
func (l *Lock) session(ctx context.Context) (*concurrency.Session, error) {
	if l.parent != nil {
		return l.parent.session(ctx)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sess != nil {
		select {
		case <-l.sess.Done():
			l.log.Error("NODE LEASE LOST: keepalive ended; reboot slot and announcement are gone",
				"lease_id", fmt.Sprintf("%x", int64(l.sess.Lease())))
			l.sess, l.heldRev, l.heldBoot = nil, 0, ""
			l.members.forget() // under l.mu: l.members is stable
		default:
			return l.sess, nil
		}
	}
	ttl := int(l.o.TTL / time.Second)
	st, found, err := readLeaseState(l.o.StateDir)
	if err != nil {
		return nil, err
	}
	if found && (st.Group != l.o.Group || st.Node != l.o.Node || st.Prefix != l.o.Prefix) {
		l.log.Warn("ignoring lease state recorded for another lock",
			"recorded_group", st.Group, "recorded_node", st.Node, "recorded_prefix", st.Prefix)
		found = false
	}
	if found && st.LeaseID != 0 {
		id := clientv3.LeaseID(st.LeaseID)
		s, err := l.adoptLease(ctx, id, ttl)
		if err != nil {
			return nil, err
		}
		if s != nil {
			l.sess = s
			return s, nil
		}
		if err := removeLeaseState(l.o.StateDir); err != nil {
			return nil, err
		}
	}
	s, err := concurrency.NewSession(l.cli, concurrency.WithTTL(ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("granting node lease: %w", err)
	}
	st = leaseState{LeaseID: int64(s.Lease()), Group: l.o.Group, Node: l.o.Node, Prefix: l.o.Prefix}
	if err := writeLeaseState(l.o.StateDir, st); err != nil {
		s.Close()
		return nil, err
	}
	l.log.Debug("granted node lease", "lease_id", fmt.Sprintf("%x", st.LeaseID), "ttl_s", ttl)
	l.sess = s
	return s, nil
}

// adoptLease resumes keepalives for a recorded lease. It returns nil, nil
// when the lease has expired, after saying so loudly.
func (l *Lock) adoptLease(ctx context.Context, id clientv3.LeaseID, ttl int) (*concurrency.Session, error) {
	resp, err := l.cli.TimeToLive(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("checking recorded node lease %x: %w", int64(id), err)
	}
	if resp.TTL > 0 {
		s, err := concurrency.NewSession(l.cli, concurrency.WithLease(id), concurrency.WithTTL(ttl),
			concurrency.WithContext(context.WithoutCancel(ctx)))
		if err != nil {
			return nil, fmt.Errorf("resuming node lease %x: %w", int64(id), err)
		}
		// NewSession does not check the lease: an expired one gives a
		// session whose Done closes at once. Confirm with one round trip.
		if ka, err := l.cli.KeepAliveOnce(ctx, id); err == nil && ka.TTL > 0 {
			l.log.Info("re-adopted node lease", "lease_id", fmt.Sprintf("%x", int64(id)), "ttl_left_s", resp.TTL)
			return s, nil
		}
		s.Orphan()
	}
	l.log.Error("NODE LEASE EXPIRED while this node was away: its reboot slot and announcement were released",
		"lease_id", fmt.Sprintf("%x", int64(id)), "reboot_budget", l.o.TTL)
	return nil, nil
}

// Done is closed when the node lease stops being kept alive (expired, or
// Close). Nil before the lease exists.
func (l *Lock) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sess == nil {
		return nil
	}
	return l.sess.Done()
}

// LeaseID is the node lease, once there is one.
func (l *Lock) LeaseID() (clientv3.LeaseID, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sess == nil {
		return 0, errors.New("no node lease yet")
	}
	return l.sess.Lease(), nil
}

// Close stops keeping the node lease alive but keeps it (and the slot): the
// agent is stopping for the reboot, or for a restart, and will Adopt again.
func (l *Lock) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sess != nil {
		l.sess.Orphan()
		l.sess = nil
	}
}

// Announce records that this node has target staged and will want a slot.
func (l *Lock) Announce(ctx context.Context, target string) error {
	member, _, err := l.refreshMember(ctx)
	if err != nil {
		return fmt.Errorf("announcing pending update %s: %w", target, err)
	}
	s, err := l.session(ctx)
	if err != nil {
		return fmt.Errorf("announcing pending update %s: %w", target, err)
	}
	a := Announcement{Node: l.o.Node, Member: member, MachineID: l.o.MachineID, Target: target, AnnouncedAt: l.o.Now().UTC()}
	if _, err := l.putOwn(ctx, l.pendingKey(), s.Lease(), func(*mvccpb.KeyValue) any { return a }); err != nil {
		return fmt.Errorf("announcing pending update %s: %w", target, err)
	}
	return nil
}

// Withdraw removes this node's announcement (never another machine's).
func (l *Lock) Withdraw(ctx context.Context) error {
	if err := l.deleteOwn(ctx, l.pendingKey()); err != nil {
		return fmt.Errorf("withdrawing pending update announcement: %w", err)
	}
	return nil
}

// Pending lists the group's announcements (this node's included) and the
// revision they were read at.
func (l *Lock) Pending(ctx context.Context) ([]Announcement, int64, error) {
	resp, err := l.cli.Get(ctx, pendingPrefix(l.o.Prefix, l.o.Group), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("listing pending updates: %w", err)
	}
	var out []Announcement
	for _, kv := range resp.Kvs {
		var a Announcement
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			l.log.Warn("ignoring unreadable announcement", "key", string(kv.Key), "err", err)
			continue
		}
		out = append(out, a)
	}
	return out, resp.Header.Revision, nil
}
