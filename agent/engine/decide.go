package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

// Decide is the engine's pure core: from the persisted record, what just
// happened and what the engine sees now, it returns the record to persist
// and the next action. The engine persists the record BEFORE acting on it,
// so the record always names the step that may be half done.
//
// The flow, in order: check -> stage gently (locked) -> wait for a window ->
// take a slot (followers first) -> pre-reboot hooks -> re-check window,
// leadership and quorum -> finalize (reboot) -> after boot: booted is the
// target and the member is healthy -> release.
func Decide(st state.State, ev Event, obs Obs, pol Policy, now time.Time) (state.State, Action) {
	d := decider{st: st.Clone(), obs: obs, pol: pol, now: now}
	if d.pol.Window == nil {
		d.pol.Window = Always{}
	}
	act := d.decide(ev)
	if d.st.Phase != st.Phase || d.st.Since.IsZero() {
		d.st.Since = now
	}
	d.st.BootID = obs.BootID
	return d.st, act
}

type decider struct {
	st  state.State
	obs Obs
	pol Policy
	now time.Time
}

// validIn lists the phases in which an action's result can arrive. Anything
// else is stale (a bug, or a record changed under the engine): re-evaluate
// from the record instead of acting on it.
var validIn = map[string][]state.Phase{
	Checked{}.eventName():      {state.Idle},
	StageDone{}.eventName():    {state.Staging},
	CleanedUp{}.eventName():    {state.Idle, state.Staging, state.Releasing},
	OrderQueried{}.eventName(): {state.Staged},
	SlotHeld{}.eventName():     {state.WaitingSlot},
	Adopted{}.eventName():      {state.WaitingSlot, state.HoldingSlot, state.Verifying},
	HooksDone{}.eventName():    {state.HoldingSlot},
	Prechecked{}.eventName():   {state.HoldingSlot},
	LeaderMoved{}.eventName():  {state.HoldingSlot},
	FinalizeDone{}.eventName(): {state.Finalizing},
	VerifyDone{}.eventName():   {state.Verifying, state.Releasing},
	Released{}.eventName():     {state.Releasing},
}

func (d *decider) decide(ev Event) Action {
	if phases, ok := validIn[ev.eventName()]; ok && !slices.Contains(phases, d.st.Phase) {
		return d.decide(Ticked{})
	}
	switch ev := ev.(type) {
	case Started:
		d.afterRestart()
		return Action{Kind: ActRecover, Reason: "restoring what an interrupted staging may have left"}
	case Recovered:
		if ev.Err != nil {
			return d.retry("restoring after an interrupted staging", ev.Err)
		}
		return d.resume()
	case Ticked:
		if !d.obs.Recovered {
			return Action{Kind: ActRecover, Reason: "retrying the restore of an interrupted staging"}
		}
		return d.ticked()

	// 1. Check for an update.
	case Checked:
		return d.checked(ev)

	// 2. Stage it gently, locked for finalization.
	case CleanedUp:
		if ev.Err != nil {
			return d.retry("discarding the staged deployment", ev.Err)
		}
		if d.st.Phase == state.Staging {
			return Action{Kind: ActStage, Reason: "staging " + d.st.Target.Checksum}
		}
		if d.st.Phase == state.Releasing {
			return d.release()
		}
		return d.idle()
	case StageDone:
		if ev.Err != nil {
			act := d.fail("stage", ev.Err)
			d.st.Phase = state.Idle
			d.st.NextCheck = d.st.Failures[d.st.Target.Checksum].RetryAt
			return d.idle().withFailure(act)
		}
		s := d.obs.OS.Staged
		if s == nil {
			act := d.fail("stage", errors.New("staging reported success but nothing is staged"))
			d.st.Phase = state.Idle
			d.st.NextCheck = d.st.Failures[d.st.Target.Checksum].RetryAt
			return d.idle().withFailure(act)
		}
		// The target is what got staged: an upgrade may have found a
		// newer commit than the check did.
		if s.Checksum != d.st.Target.Checksum {
			d.st.Target = state.Target{Checksum: s.Checksum, Version: s.Version}
		}
		d.st.Phase, d.st.Locked, d.st.LastError = state.Staged, s.Checksum, ""
		return d.staged()

	// 3. Wait for a window, then take a slot (followers first).
	case OrderQueried:
		switch {
		case ev.Err != nil:
			return d.retry("asking etcd for the leader", ev.Err)
		case ev.Leader && ev.PendingOthers > 0:
			return d.wait(d.now.Add(d.pol.RecheckInterval),
				fmt.Sprintf("local member is the etcd leader: letting %d other node(s) with pending updates reboot first", ev.PendingOthers))
		}
		return d.acquire()
	case SlotHeld:
		if ev.Err != nil {
			return d.retry("waiting for a reboot slot", ev.Err)
		}
		if ev.LeaseID != 0 {
			d.st.LeaseID = ev.LeaseID
		}
		d.st.Phase = state.HoldingSlot
		return Action{Kind: ActRunHooks, Reason: "running pre-reboot hooks"}
	case Adopted:
		return d.adopted(ev)

	// 4. Pre-reboot hooks; a failed hook gives the slot back and leaves
	// the staged update locked.
	case HooksDone:
		if ev.Err != nil {
			act := d.fail("hooks", ev.Err)
			d.st.Phase = state.Releasing
			return d.release().withFailure(act)
		}
		return Action{Kind: ActPrecheck, Reason: "last checks before finalizing"}

	// 5. Re-check window, leadership and quorum, then finalize.
	case Prechecked:
		return d.prechecked(ev)
	case LeaderMoved:
		if ev.Err != nil {
			return d.retry("moving etcd leadership away", ev.Err)
		}
		return Action{Kind: ActPrecheck, Reason: "leadership moved; checking again"}
	case FinalizeDone:
		return d.finalized(ev)

	// 6. After boot: verify, then release.
	case VerifyDone:
		switch {
		case ev.Err != nil:
			return d.retry("checking the local etcd member", ev.Err)
		case !ev.Healthy:
			return d.wait(d.now.Add(d.pol.RecheckInterval), "holding the slot until the local etcd member is healthy: "+ev.Reason)
		}
		d.st.CheckHealth = false
		if d.st.Phase == state.Releasing {
			return d.release()
		}
		delete(d.st.Failures, d.st.Target.Checksum)
		d.st.Phase, d.st.Locked, d.st.LastError = state.Releasing, "", ""
		d.st.NextCheck = d.nextCheck()
		return d.release()
	case Released:
		if ev.Err != nil {
			return d.retry("releasing the reboot slot", ev.Err)
		}
		d.st.Queued, d.st.LeaseID = false, 0
		return d.released()
	}
	panic(fmt.Sprintf("engine: unknown event %T", ev))
}

// afterRestart adjusts the record for what happened while no agent ran.
func (d *decider) afterRestart() {
	if d.st.BootID == "" || d.st.BootID == d.obs.BootID {
		return
	}
	if d.st.Queued {
		d.st.CheckHealth = true
	}
	switch d.st.Phase {
	case state.Finalizing, state.Verifying:
		d.st.Phase = state.Verifying
	case state.Staging, state.Staged, state.WaitingSlot, state.HoldingSlot:
		// An unplanned reboot discards a locked staged deployment (as
		// ostree-finalize-staged does): stage again.
		d.st.Locked = ""
		d.st.LastError = "unplanned reboot discarded the staged deployment"
		d.st.NextCheck = d.now
		if d.st.Queued {
			d.st.Phase = state.Releasing
		} else {
			d.st.Phase = state.Idle
		}
	}
}

// resume continues the persisted phase in a new process (after Recover).
func (d *decider) resume() Action {
	switch d.st.Phase {
	case state.Staging:
		if s := d.obs.OS.Staged; s != nil && s.Checksum == d.st.Target.Checksum {
			// Staging finished before the crash. Only our own locked
			// staging can have made it: a staged deployment we did not
			// make is discarded before staging starts.
			d.st.Phase, d.st.Locked = state.Staged, d.st.Target.Checksum
			return d.staged()
		}
		return d.stage()
	case state.WaitingSlot, state.HoldingSlot, state.Verifying:
		if d.st.Queued {
			return Action{Kind: ActAdopt, Reason: "re-adopting reboot-slot lease"}
		}
		if d.st.Phase == state.Verifying {
			return d.verify()
		}
		return d.backToStaged()
	case state.Finalizing:
		// Same boot: finalize-deployment may have unlocked the staged
		// deployment without a reboot following. Discard it, give the
		// slot back and stage again: never leave it unlocked.
		return d.abortFinalize()
	}
	return d.ticked()
}

// ticked continues the current phase in this process after a wait.
func (d *decider) ticked() Action {
	switch d.st.Phase {
	case state.Idle:
		return d.idle()
	case state.Staging:
		return d.stage()
	case state.Staged:
		return d.staged()
	case state.WaitingSlot:
		return d.acquire()
	case state.HoldingSlot:
		return Action{Kind: ActPrecheck, Reason: "last checks before finalizing"}
	case state.Finalizing:
		if deadline := d.st.Since.Add(d.pol.RebootTimeout); d.now.Before(deadline) {
			return d.wait(deadline, "rebooting into "+d.st.Target.Checksum)
		}
		act := d.fail("finalize", fmt.Errorf("no reboot within %s of finalize-deployment", d.pol.RebootTimeout))
		return d.abortFinalize().withFailure(act)
	case state.Verifying:
		return d.verify()
	case state.Releasing:
		return d.release()
	}
	panic(fmt.Sprintf("engine: unknown phase %q", d.st.Phase))
}

func (d *decider) idle() Action {
	if d.pol.Disabled {
		return d.wait(d.now.Add(24*time.Hour), "updates are disabled (updates.enabled = false)")
	}
	if d.obs.UpdateNow || !d.now.Before(d.st.NextCheck) {
		return Action{Kind: ActCheck, Reason: "checking for updates"}
	}
	return d.wait(d.st.NextCheck, "next check for updates")
}

func (d *decider) checked(ev Checked) Action {
	d.st.Phase = state.Idle
	if ev.Err != nil {
		d.st.LastError = fmt.Sprintf("checking for updates: %v", ev.Err)
		d.st.NextCheck = d.now.Add(d.pol.Retry.Delay(1, d.obs.Rand))
		return d.wait(d.st.NextCheck, d.st.LastError)
	}
	if ev.Target == nil {
		d.st.NextCheck = d.nextCheck()
		return d.wait(d.st.NextCheck, "no update available; next check")
	}
	t := *ev.Target
	f := d.st.Failures[t.Checksum]
	if d.obs.UpdateNow && (f.SetAside || d.now.Before(f.RetryAt)) {
		delete(d.st.Failures, t.Checksum) // an operator asked: try again
	} else if f.SetAside {
		d.st.NextCheck = d.nextCheck()
		return d.wait(d.st.NextCheck, fmt.Sprintf("update %s set aside after %d failures (last: %s); run update-now to retry", t.Checksum, f.Count, f.LastError))
	} else if d.now.Before(f.RetryAt) {
		d.st.NextCheck = f.RetryAt
		return d.wait(f.RetryAt, fmt.Sprintf("retrying update %s after failure %d (%s)", t.Checksum, f.Count, f.LastError))
	}
	d.st.Phase, d.st.Target = state.Staging, t
	return d.stage()
}

// stage stages Target, first discarding any staged deployment: one we did
// not lock may be unlocked, and staging onto it would print "No change."
// without locking it.
func (d *decider) stage() Action {
	d.st.Locked = ""
	if d.obs.OS.Staged != nil {
		return Action{Kind: ActCleanup, Reason: "discarding staged deployment " + d.obs.OS.Staged.Checksum + " before staging"}
	}
	return Action{Kind: ActStage, Reason: "staging " + d.st.Target.Checksum}
}

// staged waits for the window with the update staged and locked.
func (d *decider) staged() Action {
	if s := d.obs.OS.Staged; s == nil || s.Checksum != d.st.Locked {
		d.st.Phase, d.st.Locked, d.st.NextCheck = state.Idle, "", d.now
		d.st.LastError = "the staged deployment disappeared; staging again"
		return d.idle()
	}
	if f := d.st.Failures[d.st.Target.Checksum]; d.now.Before(f.RetryAt) {
		return d.wait(f.RetryAt, fmt.Sprintf("staged; retrying after failure %d (%s)", f.Count, f.LastError))
	}
	if !d.pol.Window.Contains(d.now) {
		next := d.pol.Window.Next(d.now)
		if !next.After(d.now) { // a window that never opens: look again later
			next = d.now.Add(d.pol.CheckInterval)
		}
		return d.wait(next, "staged; waiting for the reboot window")
	}
	if d.pol.LeaderAware {
		return Action{Kind: ActQueryOrder, Reason: "checking etcd leadership before queueing"}
	}
	return d.acquire()
}

// acquire queues for a slot; Queued is persisted first so that a restart
// looks for the entry even if the process dies right after creating it.
func (d *decider) acquire() Action {
	d.st.Phase, d.st.Queued = state.WaitingSlot, true
	return Action{Kind: ActAcquire, Reason: "waiting for a reboot slot"}
}

func (d *decider) backToStaged() Action {
	d.st.Phase, d.st.Queued, d.st.LeaseID = state.Staged, false, 0
	return d.staged()
}

func (d *decider) adopted(ev Adopted) Action {
	if ev.Err != nil {
		return d.retry("re-adopting the reboot-slot lease", ev.Err)
	}
	if ev.Lease == LeaseGone {
		d.st.LastError = "the reboot-slot entry expired while the agent was not running"
		d.st.Queued, d.st.LeaseID = false, 0
		if d.st.Phase == state.Verifying {
			return d.verify() // nothing left to release
		}
		return d.backToStaged()
	}
	switch d.st.Phase {
	case state.Verifying:
		return d.verify()
	case state.HoldingSlot:
		if ev.Lease == LeaseHolding {
			if s := d.obs.OS.Staged; s == nil || s.Checksum != d.st.Locked {
				d.st.Phase = state.Releasing
				return d.release()
			}
			// Hooks may have half run: run them again (drain is idempotent).
			return Action{Kind: ActRunHooks, Reason: "running pre-reboot hooks again after a restart"}
		}
		d.st.Phase = state.WaitingSlot
	}
	if ev.Lease == LeaseHolding {
		return d.decide(SlotHeld{})
	}
	return d.acquire()
}

func (d *decider) prechecked(ev Prechecked) Action {
	switch {
	case !d.pol.Window.Contains(d.now):
		d.st.Phase = state.Releasing
		d.st.LastError = "the reboot window closed before finalizing"
		return d.release()
	case ev.Err != nil:
		return d.retry("checking etcd before finalizing", ev.Err)
	case ev.SlotLost || !d.st.Queued:
		d.st.LastError = "the reboot slot was lost before finalizing"
		return d.backToStaged()
	case d.obs.OS.Staged == nil || d.obs.OS.Staged.Checksum != d.st.Locked || d.st.Locked == "":
		d.st.Phase = state.Releasing
		d.st.LastError = "the staged deployment changed before finalizing"
		return d.release()
	case ev.Leader && d.pol.MoveLeader:
		return Action{Kind: ActMoveLeader, Reason: "local member is the etcd leader: moving leadership away"}
	case !ev.Safe && d.pol.RequireSafe:
		return d.wait(d.now.Add(d.pol.RecheckInterval), "holding the slot; not safe to reboot: "+ev.Reason)
	}
	d.st.Phase = state.Finalizing
	return Action{Kind: ActFinalize, Reason: "finalizing " + d.st.Locked + " and rebooting"}
}

func (d *decider) finalized(ev FinalizeDone) Action {
	switch {
	case ev.Err == nil:
		return d.wait(d.now.Add(d.pol.RebootTimeout), "rebooting into "+d.st.Target.Checksum)
	case errors.Is(ev.Err, ErrNoStagedDeployment):
		d.st.Phase, d.st.Locked, d.st.NextCheck = state.Releasing, "", d.now
		d.st.LastError = "finalizing: " + ev.Err.Error()
		return d.release()
	case errors.Is(ev.Err, ErrInhibited):
		// A refused finalize did not unlock: keep the staged update.
		act := d.fail("finalize", ev.Err)
		d.st.Phase = state.Releasing
		return d.release().withFailure(act)
	}
	// Already unlocked, another checksum, or unknown: the staged deployment
	// may be unlocked. Discard it and stage again; the failure count bounds
	// how often.
	act := d.fail("finalize", ev.Err)
	return d.abortFinalize().withFailure(act)
}

func (d *decider) abortFinalize() Action {
	d.st.Phase, d.st.Locked, d.st.NextCheck = state.Releasing, "", d.now
	if d.obs.OS.Staged != nil {
		return Action{Kind: ActCleanup, Reason: "discarding a staged deployment that may be unlocked"}
	}
	return d.release()
}

func (d *decider) verify() Action {
	d.st.Phase = state.Verifying
	if b := d.obs.OS.Booted.Checksum; b != d.st.Target.Checksum {
		act := d.fail("verify", fmt.Errorf("booted %s, expected %s", b, d.st.Target.Checksum))
		d.st.Phase, d.st.Locked = state.Releasing, ""
		return d.release().withFailure(act)
	}
	return Action{Kind: ActVerify, Reason: "booted " + d.st.Target.Checksum + "; checking the local etcd member"}
}

func (d *decider) release() Action {
	if !d.st.Queued {
		d.st.CheckHealth = false
		return d.released()
	}
	if d.st.CheckHealth {
		return Action{Kind: ActVerify, Reason: "the host rebooted while holding the slot; checking the local etcd member before releasing"}
	}
	return Action{Kind: ActRelease, Reason: "releasing the reboot slot", Withdraw: d.st.Locked == ""}
}

func (d *decider) released() Action {
	s := d.obs.OS.Staged
	switch {
	case d.st.Locked != "" && s != nil && s.Checksum == d.st.Locked:
		d.st.Phase = state.Staged
		return d.staged()
	case s != nil && d.st.Phase != state.Idle:
		// Not ours, or possibly unlocked: never leave it for an unplanned
		// reboot to apply.
		d.st.Phase, d.st.Locked = state.Idle, ""
		return Action{Kind: ActCleanup, Reason: "discarding a staged deployment the agent did not lock"}
	}
	d.st.Phase, d.st.Locked = state.Idle, ""
	return d.idle()
}

// fail records a failure of the current target and schedules its retry.
func (d *decider) fail(step string, err error) Action {
	t := d.st.Target.Checksum
	if d.st.Failures == nil {
		d.st.Failures = map[string]state.Failure{}
	}
	f := d.st.Failures[t]
	f.Count++
	f.Last = d.now
	f.LastError = fmt.Sprintf("%s: %v", step, err)
	f.RetryAt = d.now.Add(d.pol.Retry.Delay(f.Count, d.obs.Rand))
	f.SetAside = d.pol.MaxFailures > 0 && f.Count >= d.pol.MaxFailures
	d.st.Failures[t] = f
	d.st.LastError = f.LastError
	d.st.NextCheck = d.now
	return Action{Failed: step}
}

func (a Action) withFailure(f Action) Action {
	a.Failed = f.Failed
	return a
}

// retry waits and tries the current step again (etcd or rpm-ostree
// unreachable): not a failure of the target.
func (d *decider) retry(what string, err error) Action {
	d.st.LastError = fmt.Sprintf("%s: %v", what, err)
	return d.wait(d.now.Add(d.pol.RecheckInterval), d.st.LastError+"; retrying")
}

func (d *decider) wait(until time.Time, reason string) Action {
	return Action{Kind: ActWait, Until: until, Reason: reason}
}

func (d *decider) nextCheck() time.Time {
	return d.now.Add(d.pol.CheckInterval + time.Duration(float64(d.pol.CheckJitter)*d.obs.Rand))
}
