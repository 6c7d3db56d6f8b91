package engine

import (
	"context"
	"errors"
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

// The engine's ports: small interfaces it owns, implemented by adapters over
// agent/rpmostree, agent/stage, agent/lock and agent/etcdmember (see
// cmd/update-agent/wire.go) and by fakes in tests.

// Deployment is what the engine needs to know of an rpm-ostree deployment.
type Deployment struct {
	// Checksum is what finalize-deployment expects for it (base checksum,
	// checksum, or image digest).
	Checksum string `json:"checksum"`
	Version  string `json:"version,omitempty"`
	// Unlocked (a staged deployment only): the host shows its finalization
	// lock gone, so any reboot, planned or not, applies it. Someone other
	// than the agent unlocked it when the agent has not finalized (bootc's
	// update timer, `bootc upgrade`, `rpm-ostree finalize-deployment`).
	// False when the adapter cannot tell.
	Unlocked bool `json:"unlocked,omitempty"`
}

// OSStatus is rpm-ostree's status, reduced.
type OSStatus struct {
	Booted Deployment  `json:"booted"`
	Staged *Deployment `json:"staged,omitempty"`
}

// OS drives rpm-ostree.
type OS interface {
	Status(ctx context.Context) (OSStatus, error)
	// Check returns the available update, or nil when there is none.
	Check(ctx context.Context) (*state.Target, error)
	// Finalize unlocks the staged deployment and reboots. Refusals the
	// engine acts on wrap the Err* values below.
	Finalize(ctx context.Context, checksum string) error
	// Cleanup discards the staged deployment (rpm-ostree cleanup -p).
	Cleanup(ctx context.Context) error
}

// Finalize refusals the engine acts on, wrapped by OS adapters. Any other
// error (another checksum staged, already unlocked) means the staged
// deployment may be unlocked: the engine discards it.
var (
	ErrNoStagedDeployment = errors.New("no pending staged deployment")
	ErrInhibited          = errors.New("reboot blocked by a systemd inhibitor lock")
)

// ErrBusy: rpm-ostree runs a transaction the agent did not start (an
// operator's install). Wrapped by the Stager's and OS's adapters; a step
// that meets it waits and tries again, and it never counts as a failure of
// the update.
var ErrBusy = errors.New("rpm-ostree is busy with another transaction")

// Stager stages gently (transient unit, I/O policy, guard) with
// --lock-finalization, and undoes what an interrupted staging left behind.
type Stager interface {
	// Stage returns once target is staged and locked; cancelling ctx
	// cancels the transaction (SIGINT semantics) and undoes the policy.
	Stage(ctx context.Context, target state.Target) error
	// Recover restores the scheduler, drop-ins and frozen units an earlier
	// process left behind. Idempotent.
	Recover(ctx context.Context) error
}

// LeaseState is what became of a persisted lease.
type LeaseState int

const (
	LeaseGone    LeaseState = iota // expired or revoked: the slot (or place in line) is lost
	LeaseWaiting                   // alive, still in line
	LeaseHolding                   // alive and holding a slot
)

func (l LeaseState) String() string {
	return [...]string{"gone", "waiting", "holding"}[l]
}

// Lock is the reboot-slot semaphore in etcd.
type Lock interface {
	// Acquire queues this node and blocks until it holds a slot. It is
	// idempotent per node: an entry an earlier process left keeps its place
	// (the engine may die between queueing and recording it).
	Acquire(ctx context.Context, target string) (leaseID int64, err error)
	// Adopt re-attaches this node's entry after a restart or reboot, keeps
	// its lease alive and says where it stands. Idempotent.
	Adopt(ctx context.Context) (LeaseState, error)
	// Release deletes the entry and revokes the lease; an entry already
	// gone is not an error.
	Release(ctx context.Context) error
	// Announce records that this node has target staged and pending, so a
	// leader lets its followers go first; Withdraw removes the record.
	Announce(ctx context.Context, target string) error
	Withdraw(ctx context.Context) error
	// Fence proves, right before finalizing, that this node still holds
	// its slot and will through the reboot budget (a transaction on the
	// holder key's lease and create revision, the lease just renewed).
	// ErrSlotLost when it does not; any other error: it could not tell.
	Fence(ctx context.Context) error
}

// QueueOrder is the leader rule's answer to "may this node queue now".
type QueueOrder struct {
	MayQueue bool
	Reason   string // why not, when !MayQueue
	// Unannounced: with MayQueue, the local member leads (followers first)
	// and these other voting members have announced no update. The engine
	// gives them leader.followers_grace to announce before queueing,
	// unless it saw them in Pending since it staged (they have updated).
	Unannounced []string
	// Pending: the members whose nodes have an update pending (the group's
	// announcements), as read for the rule.
	Pending []string
}

// ErrRefused: the cluster cannot lose this member, and waiting will not
// change that. Wrapped by Cluster adapters.
var ErrRefused = errors.New("reboot refused")

// ErrSlotLost: Fence found the slot gone (lease expired, or released by an
// operator). Wrapped by Lock adapters.
var ErrSlotLost = errors.New("reboot slot lost")

// Cluster is the local etcd member's view of its cluster.
type Cluster interface {
	// MayQueue applies the leader rule (etcdmember.MayAcquire, the one
	// rule): whether this node may queue for a reboot slot now, and who
	// has not announced an update yet.
	MayQueue(ctx context.Context) (QueueOrder, error)
	LocalIsLeader(ctx context.Context) (bool, error)
	// SafeToReboot reports whether quorum survives this member going down
	// and every other member is healthy; reason says why not. An error
	// wrapping ErrRefused: never under this configuration (a 1- or
	// 2-member cluster without etcd.allow_quorum_loss).
	SafeToReboot(ctx context.Context) (ok bool, reason string, err error)
	// MoveLeaderAway hands leadership to the best follower and confirms it.
	MoveLeaderAway(ctx context.Context) error
	// LocalHealthy reports whether the local member is healthy and caught up.
	LocalHealthy(ctx context.Context) (ok bool, reason string, err error)
}

// Hooks runs the pre-reboot hooks (drain, stop kubelet...).
type Hooks interface {
	Run(ctx context.Context) error
}

// Gates hold the reboot while the cluster is in trouble: etcd alarms,
// firing alerts, operator commands, spacing after the group's previous
// reboot (agent/gates). A gate that cannot be evaluated holds.
type Gates interface {
	// Hold says whether any gate holds the reboot now, and why (every
	// holding gate, with the numbers behind it).
	Hold(ctx context.Context) (hold bool, reason string)
	// Rebooted records that this node released its slot after its reboot,
	// which starts the group's spacing (lock.min_interval).
	Rebooted(ctx context.Context) error
}

// Host is the host's own side of a reboot: the people logged in, and
// systemd's verdict on the boot.
type Host interface {
	// Announce tells the people on the host that target is about to be
	// applied (motd line, wall); it does not wait. The engine then waits
	// for logged-in users (Policy.LoggedInDelay) before the last checks.
	Announce(ctx context.Context, target string) error
	// LoggedIn counts the interactive sessions (logind).
	LoggedIn(ctx context.Context) (int, error)
	// Unannounce takes the announcement back (no reboot after all).
	Unannounce() error
	// BootComplete reports whether systemd judged this boot good
	// (boot-complete.target reached).
	BootComplete(ctx context.Context) (bool, error)
}

// Window is when reboots are allowed (config's reboot windows).
type Window interface {
	Contains(t time.Time) bool
	// Next returns the next time at or after t inside the window.
	Next(t time.Time) time.Time
}

// Store persists the engine's record (state.Store).
type Store interface {
	Load() (state.State, error)
	Save(state.State) error
}

// Always is the window of the "immediate" reboot strategy.
type Always struct{}

func (Always) Contains(time.Time) bool    { return true }
func (Always) Next(t time.Time) time.Time { return t }

// NoLock stands in when locking is disabled: one holder, always granted.
type NoLock struct{}

func (NoLock) Acquire(context.Context, string) (int64, error) { return 0, nil }
func (NoLock) Adopt(context.Context) (LeaseState, error)      { return LeaseHolding, nil }
func (NoLock) Release(context.Context) error                  { return nil }
func (NoLock) Announce(context.Context, string) error         { return nil }
func (NoLock) Withdraw(context.Context) error                 { return nil }
func (NoLock) Fence(context.Context) error                    { return nil }
func (NoCluster) MayQueue(context.Context) (QueueOrder, error) {
	return QueueOrder{MayQueue: true}, nil
}
func (NoCluster) LocalIsLeader(context.Context) (bool, error)        { return false, nil }
func (NoCluster) SafeToReboot(context.Context) (bool, string, error) { return true, "", nil }
func (NoCluster) MoveLeaderAway(context.Context) error               { return nil }
func (NoCluster) LocalHealthy(context.Context) (bool, string, error) { return true, "", nil }
func (NoHooks) Run(context.Context) error                            { return nil }

func (NoGates) Hold(context.Context) (bool, string)       { return false, "" }
func (NoGates) Rebooted(context.Context) error            { return nil }
func (NoHost) Announce(context.Context, string) error     { return nil }
func (NoHost) LoggedIn(context.Context) (int, error)      { return 0, nil }
func (NoHost) Unannounce() error                          { return nil }
func (NoHost) BootComplete(context.Context) (bool, error) { return true, nil }

// NoGates stands in when no gate is configured.
type NoGates struct{}

// NoHost stands in where the host is not told nor asked (tests).
type NoHost struct{}

// NoCluster stands in when no etcd member runs on the host.
type NoCluster struct{}

// NoHooks stands in when no pre-reboot hooks are configured.
type NoHooks struct{}
