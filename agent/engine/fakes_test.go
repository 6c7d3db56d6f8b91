package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/update-agent/update-agent/agent/state"
)

// world is one fake host at the engine's unit boundary: rpm-ostree (booted
// and staged deployments, the finalization lock, /run lost on reboot), the
// stager's undo record, a one-slot lease lock and an etcd member. It checks
// the engine's invariants as the engine drives it.
type world struct {
	mu sync.Mutex

	bootID    string
	booted    string
	staged    string
	locked    bool
	available state.Target

	policyApplied bool // the stager's bfq/drop-ins, until undone

	leases    map[int64]bool // this node's alive entry (at most one) -> holds the slot
	nextLease int64

	leader bool
	// downWhileHolding: the host rebooted while a slot was held and the
	// member has not been checked since.
	downWhileHolding bool

	// Fault injection.
	stageNoLock int   // stagings that leave the deployment unlocked (the "No change." trap)
	stageErr    error // every staging fails
	hookErr     error

	// Counters and findings.
	stages, finalizes, releases int
	rebootPending               bool
	violations                  []string
	onFinalize                  func()       // the harness stops the engine: the host goes down
	note                        func(string) // sees fence and finalize, in order with other fakes
	onStageStep                 func() error
}

func newWorld() *world {
	return &world{bootID: "boot-1", booted: "old", available: tgt, leases: map[int64]bool{}, nextLease: 0x100}
}

func (w *world) violate(format string, a ...any) {
	w.violations = append(w.violations, fmt.Sprintf(format, a...))
}

func (w *world) holding() bool {
	for _, h := range w.leases {
		if h {
			return true
		}
	}
	return false
}

// reboot is the host going down and up: /run is lost, so a staged
// deployment still locked is discarded and an unlocked one becomes booted.
func (w *world) reboot(planned bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.staged != "" && !w.locked {
		if !planned {
			w.violate("unplanned reboot applied unlocked staged deployment %s", w.staged)
		}
		w.booted = w.staged
	}
	w.staged, w.locked, w.rebootPending = "", false, false
	w.bootID += "+"
	if w.holding() {
		w.downWhileHolding = true
	}
}

// --- OS ---

func (w *world) Status(ctx context.Context) (OSStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := OSStatus{Booted: Deployment{Checksum: w.booted}}
	if w.staged != "" {
		s.Staged = &Deployment{Checksum: w.staged}
	}
	return s, nil
}

func (w *world) Check(ctx context.Context) (*state.Target, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.policyApplied {
		w.violate("check ran with the staging policy of an interrupted staging still applied")
	}
	if w.booted == w.available.Checksum {
		return nil, nil
	}
	t := w.available
	return &t, nil
}

func (w *world) Finalize(ctx context.Context, checksum string) error {
	w.mu.Lock()
	if w.note != nil {
		w.note("finalize")
	}
	w.finalizes++
	switch {
	case w.staged == "":
		w.mu.Unlock()
		return fmt.Errorf("finalize: %w", ErrNoStagedDeployment)
	case w.staged != checksum:
		w.mu.Unlock()
		return errors.New("finalize: staged deployment checksum mismatch")
	case !w.locked:
		w.mu.Unlock()
		return errors.New("finalize: staged deployment already unlocked")
	}
	if !w.holding() {
		w.violate("finalize without the reboot slot")
	}
	if w.policyApplied {
		w.violate("finalize with the staging policy still applied")
	}
	w.locked, w.rebootPending = false, true
	stop := w.onFinalize
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
	return nil
}

func (w *world) Cleanup(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.staged, w.locked = "", false
	return nil
}

// --- Stager ---

func (w *world) Stage(ctx context.Context, t state.Target) error {
	w.mu.Lock()
	w.stages++
	if w.staged != "" && !w.locked {
		w.violate("staging onto an unlocked staged deployment (it would not be re-locked)")
	}
	w.policyApplied = true
	step := w.onStageStep
	w.mu.Unlock()
	if step != nil {
		if err := step(); err != nil {
			return err // killed halfway: the policy stays applied
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.policyApplied = false
	if w.stageErr != nil {
		return w.stageErr
	}
	w.staged, w.locked = t.Checksum, true
	if w.stageNoLock > 0 {
		w.stageNoLock--
		w.locked = false
	}
	return nil
}

func (w *world) Recover(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.policyApplied = false
	return nil
}

// --- Lock (one slot, this node only) ---

// Acquire is idempotent per node, like agent/lock: an entry left by an
// earlier process keeps its place.
func (w *world) Acquire(ctx context.Context, target string) (int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.leases {
		w.leases[id] = true
		return id, nil
	}
	w.nextLease++
	w.leases[w.nextLease] = true
	return w.nextLease, nil
}

func (w *world) Adopt(ctx context.Context) (LeaseState, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.leases {
		if h {
			return LeaseHolding, nil
		}
		return LeaseWaiting, nil
	}
	return LeaseGone, nil
}

func (w *world) Release(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.releases++
	if w.holding() && w.downWhileHolding {
		w.violate("slot released after a reboot before the member was checked")
	}
	if w.holding() && w.staged != "" && !w.locked {
		w.violate("slot released while unlocked staged deployment %s waits for any reboot", w.staged)
	}
	w.leases = map[int64]bool{}
	return nil
}

func (w *world) Announce(ctx context.Context, target string) error { return nil }
func (w *world) Withdraw(ctx context.Context) error                { return nil }

func (w *world) Fence(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.note != nil {
		w.note("fence")
	}
	if !w.holding() {
		return ErrSlotLost
	}
	return nil
}

func (w *world) expireLeases() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.leases = map[int64]bool{}
}

// --- Cluster ---

func (w *world) MayQueue(ctx context.Context) (QueueOrder, error) {
	return QueueOrder{MayQueue: true}, nil
}

func (w *world) LocalIsLeader(ctx context.Context) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.leader, nil
}

func (w *world) SafeToReboot(ctx context.Context) (bool, string, error) { return true, "", nil }

func (w *world) MoveLeaderAway(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.leader = false
	return nil
}

func (w *world) LocalHealthy(ctx context.Context) (bool, string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.downWhileHolding = false
	return true, "", nil
}

// --- Hooks ---

func (w *world) Run(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.holding() {
		w.violate("pre-reboot hooks without the slot")
	}
	return w.hookErr
}

// killStore is the state store of a process that dies at its n-th save:
// either right after the record reached the disk (killed before acting on
// it) or right before (killed after the previous action finished).
type killStore struct {
	Store
	n, at   int
	written bool
}

var errKilled = errors.New("killed")

func (k *killStore) Save(st state.State) error {
	k.n++
	if k.n != k.at {
		return k.Store.Save(st)
	}
	if k.written {
		if err := k.Store.Save(st); err != nil {
			return err
		}
	}
	return errKilled
}

// memDisk is the harness's state directory in memory: what a process saved
// survives it, as bytes. (state.Store's atomic, durable writes are tested
// in agent/state; the kill tests are about what was saved, and fsync on a
// busy machine would make them slow.)
type memDisk struct {
	mu sync.Mutex
	b  []byte
}

func (m *memDisk) Load() (state.State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.b == nil {
		return state.State{Phase: state.Idle}, nil
	}
	var st state.State
	err := json.Unmarshal(m.b, &st)
	return st, err
}

func (m *memDisk) Save(st state.State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.b = b
	m.mu.Unlock()
	return nil
}
