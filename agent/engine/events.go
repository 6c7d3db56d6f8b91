package engine

import (
	"fmt"
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

// Event is what happened since the last decision: the engine (re)started, a
// wait ended, or the last action finished with this result.
type Event interface{ eventName() string }

type (
	// Started: a new process loaded the persisted record.
	Started struct{}
	// Ticked: a wait ended (its time came, or an operator ran update-now).
	Ticked struct{}
	// Recovered: the stager undid what an interrupted staging left behind.
	Recovered struct{ Err error }
	// Checked: the check for updates; Target nil means none.
	Checked struct {
		Target *state.Target
		Err    error
		// Pulled: the source no longer offers the release staged on the
		// host (PulledRelease); the check itself succeeded.
		Pulled *Pulled
	}
	// StageDone: staging with --lock-finalization finished.
	StageDone struct{ Err error }
	// CleanedUp: rpm-ostree cleanup -p finished.
	CleanedUp struct{ Err error }
	// OrderQueried: the leader rule's answer before queueing for a slot.
	OrderQueried struct {
		QueueOrder
		Err error
	}
	// SlotHeld: this node holds a reboot slot.
	SlotHeld struct {
		LeaseID int64
		Err     error
	}
	// Adopted: a persisted lease was re-attached after a restart or reboot.
	Adopted struct {
		Lease LeaseState
		Err   error
	}
	// HooksDone: the pre-reboot hooks ran.
	HooksDone struct{ Err error }
	// Prechecked: the look at the slot, leadership and quorum before the
	// hooks, and again before finalizing.
	Prechecked struct {
		// SlotLost: the lease no longer holds a slot (it expired).
		SlotLost bool
		Leader   bool
		Safe     bool
		// Refused: the cluster can never lose this member under this
		// configuration (ErrRefused); Reason says why.
		Refused bool
		// Gated: the reboot gates that hold the node, and why ("" = none).
		Gated string
		// LoggedIn: the interactive sessions on the host, asked only while
		// the logged-in delay after the notice runs; -1: could not tell.
		LoggedIn int
		Reason   string
		Err      error
	}
	// NoticeDone: the people on the host were told that the reboot is
	// coming (motd line, wall). Telling is best effort: a failure is logged
	// and never holds the reboot.
	NoticeDone struct{}
	// FenceDone: the slot was proven held right before finalizing (Err
	// nil), found lost (ErrSlotLost), or could not be proven.
	FenceDone struct{ Err error }
	// LeaderMoved: leadership was handed to a follower.
	LeaderMoved struct{ Err error }
	// FinalizeDone: finalize-deployment returned; nil means the reboot is
	// under way.
	FinalizeDone struct{ Err error }
	// VerifyDone: the local etcd member's health after boot.
	VerifyDone struct {
		// BootPending: boot-complete.target is not reached yet.
		BootPending bool
		Healthy     bool
		Reason      string
		Err         error
	}
	// Released: the slot was given back.
	Released struct{ Err error }
)

func (Started) eventName() string      { return "started" }
func (Ticked) eventName() string       { return "ticked" }
func (Recovered) eventName() string    { return "recovered" }
func (Checked) eventName() string      { return "checked" }
func (StageDone) eventName() string    { return "stage_done" }
func (CleanedUp) eventName() string    { return "cleaned_up" }
func (OrderQueried) eventName() string { return "order_queried" }
func (SlotHeld) eventName() string     { return "slot_held" }
func (Adopted) eventName() string      { return "adopted" }
func (HooksDone) eventName() string    { return "hooks_done" }
func (Prechecked) eventName() string   { return "prechecked" }
func (LeaderMoved) eventName() string  { return "leader_moved" }
func (NoticeDone) eventName() string   { return "noticed" }
func (FenceDone) eventName() string    { return "fenced" }
func (FinalizeDone) eventName() string { return "finalized" }
func (VerifyDone) eventName() string   { return "verified" }
func (Released) eventName() string     { return "released" }

// ActionKind is the next thing the engine does.
type ActionKind string

const (
	ActWait       ActionKind = "wait"        // until Action.Until, or update-now
	ActRecover    ActionKind = "recover"     // stager's undo of an interrupted staging
	ActCheck      ActionKind = "check"       // rpm-ostree upgrade --check
	ActStage      ActionKind = "stage"       // gentle staging, --lock-finalization
	ActCleanup    ActionKind = "cleanup"     // rpm-ostree cleanup -p
	ActQueryOrder ActionKind = "query_order" // the leader rule: may this node queue now?
	ActAcquire    ActionKind = "acquire"     // queue for a reboot slot and wait until held
	ActAdopt      ActionKind = "adopt"       // re-attach the persisted lease
	ActRunHooks   ActionKind = "run_hooks"   // pre-reboot hooks
	ActPrecheck   ActionKind = "precheck"    // slot, leadership and quorum: before the hooks and before finalizing
	ActMoveLeader ActionKind = "move_leader" // hand leadership away
	ActNotify     ActionKind = "notify"      // tell the people on the host: motd line, wall
	ActFence      ActionKind = "fence"       // prove the slot is held, right before finalizing
	ActFinalize   ActionKind = "finalize"    // finalize-deployment: unlock + reboot
	ActVerify     ActionKind = "verify"      // local member healthy after boot
	ActRelease    ActionKind = "release"     // give the slot back
)

// Action is what Decide asks the engine to do next.
type Action struct {
	Kind ActionKind `json:"kind"`
	// Until is when an ActWait ends.
	Until time.Time `json:"until,omitzero"`
	// Reason says why, in words an operator reads in `status` and the
	// journal (wait_reason).
	Reason string `json:"reason,omitempty"`
	// Withdraw: with ActRelease, also withdraw the pending-update
	// announcement (nothing is staged any more).
	Withdraw bool `json:"withdraw,omitempty"`
	// Rebooted: with ActRelease, the release ends a reboot into the
	// target (it starts the group's reboot spacing).
	Rebooted bool `json:"rebooted,omitempty"`
	// Failed names the step whose failure this decision recorded.
	Failed string `json:"failed,omitempty"`
}

func (a Action) String() string {
	s := string(a.Kind)
	if a.Kind == ActWait {
		s += " until " + a.Until.Format(time.RFC3339)
	}
	if a.Reason != "" {
		s += fmt.Sprintf(" (%s)", a.Reason)
	}
	return s
}

// Obs is what the engine observed right before deciding.
type Obs struct {
	BootID string
	OS     OSStatus
	// Recovered: the stager's Recover ran successfully in this process.
	Recovered bool
	// UpdateNow: an operator asked for a check now (update-now); it lifts
	// the current target's backoff and set-aside.
	UpdateNow bool
	// Rand in [0,1) feeds jitter, so Decide stays a pure function.
	Rand float64
	// FinalizedHere: finalize-deployment succeeded in this process (in this
	// boot); RebootWait is how long ago, on the process's monotonic clock.
	// A reboot is judged overdue by this, never by comparing wall-clock
	// times (a clock step of hours must change nothing). A changed boot ID
	// is what says the reboot happened.
	FinalizedHere bool
	RebootWait    time.Duration
}

// Policy is the configured behaviour Decide follows.
type Policy struct {
	// Disabled: no checks for updates (an update in flight still finishes).
	Disabled      bool
	CheckInterval time.Duration
	CheckJitter   time.Duration // up to this much is added to each interval
	Retry         Backoff
	MaxFailures   int // a target failing this many times is set aside
	Window        Window
	// (Followers first is the Cluster port's rule, etcdmember.MayAcquire
	// with leader.followers_first: the engine always asks it.)
	// FollowersGrace is leader.followers_grace: how long after staging a
	// leader that may queue waits for the members that have not announced
	// an update yet (QueueOrder.Unannounced); 0: not at all.
	FollowersGrace time.Duration
	// MoveLeader: a leader hands leadership away before finalizing.
	MoveLeader bool
	// RequireSafe: no finalize while quorum would be lost or another
	// member is unhealthy.
	RequireSafe bool
	// RecheckInterval paces waits for etcd, quorum and health.
	RecheckInterval time.Duration
	// WatchStaged: while the update waits staged for the window, the
	// host is looked at this often, so that a finalization lock someone
	// else removed is seen and the deployment discarded before a reboot
	// applies it; 0: only at the window and the checks.
	WatchStaged time.Duration
	// RebootTimeout: finalize succeeded but no reboot came by then
	// (Obs.RebootWait, monotonic).
	RebootTimeout time.Duration
	// LoggedInDelay: after the notice, while users are logged in, the
	// last checks and the fence wait up to this long for them to log out
	// (reboot.logged_in_delay); 0: not at all.
	LoggedInDelay time.Duration
	// RecheckStaged: the update source can say that a staged release was
	// pulled (the update graph). The check is then due again once staging
	// is done, and the staged update is checked whenever the check is due
	// before queueing for a slot, even with the window open (strategy
	// "immediate", where no check would run while staged), and once more
	// when the slot is granted, before the pre-reboot hooks.
	RecheckStaged bool
}

// Backoff is retry delay policy: exponential from Base, capped at Max,
// spread by ±Jitter/2 (a fraction) so a fleet does not retry in step.
type Backoff struct {
	Base, Max time.Duration
	Jitter    float64
}

// Delay is the wait after the n-th consecutive failure; r in [0,1).
func (b Backoff) Delay(n int, r float64) time.Duration {
	if n < 1 {
		n = 1
	}
	d := b.Base
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	if b.Max > 0 && d > b.Max {
		d = b.Max
	}
	return time.Duration(float64(d) * (1 - b.Jitter/2 + b.Jitter*r))
}
