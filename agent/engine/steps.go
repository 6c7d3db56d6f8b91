package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

// The decider's steps, in flow order: idle and check, stage, wait for the
// window and the slot, last checks and finalize, verify and release; then
// the failure bookkeeping they share.

func (d *decider) idle() Action {
	if d.pol.Disabled {
		return d.wait(d.now.Add(24*time.Hour), "updates are disabled (updates.enabled = false)")
	}
	if d.obs.UpdateNow || !d.now.Before(d.st.NextCheck) {
		return Action{Kind: ActCheck, Reason: "checking for updates"}
	}
	return d.wait(d.st.NextCheck, "next check for updates")
}

func (d *decider) onChecked(ev Checked) Action {
	switch d.st.Phase {
	case state.Staged:
		return d.checkedWhileStaged(ev)
	case state.HoldingSlot:
		return d.checkedHoldingSlot(ev)
	}
	d.st.Phase = state.Idle
	if errors.Is(ev.Err, ErrBusy) {
		d.st.LastError = fmt.Sprintf("checking for updates: %v", ev.Err)
		d.st.NextCheck = d.now.Add(d.pol.RecheckInterval)
		return d.wait(d.st.NextCheck, "busy: "+d.st.LastError)
	}
	if ev.Err != nil {
		d.st.LastError = fmt.Sprintf("checking for updates: %v", ev.Err)
		d.st.NextCheck = d.now.Add(d.pol.Retry.Delay(1, d.obs.Rand))
		return d.wait(d.st.NextCheck, d.st.LastError)
	}
	if p := ev.Pulled; p != nil && d.obs.OS.Staged != nil && d.obs.OS.Staged.Checksum == p.Checksum {
		// Left staged by a process that died before discarding it, or
		// by somebody else: a pulled release goes wherever it came from.
		d.setAsidePulled(p)
		return Action{Kind: ActCleanup, Reason: p.Message + ": discarding its staged deployment"}
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
		return d.wait(d.st.NextCheck, fmt.Sprintf("update %s %s; run update-now to retry", t.Checksum, setAsideWhy(f)))
	} else if d.now.Before(f.RetryAt) {
		d.st.NextCheck = f.RetryAt
		return d.wait(f.RetryAt, fmt.Sprintf("retrying update %s after failure %d (%s)", t.Checksum, f.Count, f.LastError))
	}
	d.st.Phase, d.st.Target = state.Staging, t
	return d.stage()
}

// checkedWhileStaged replaces the staged update when the origin now offers
// another one (a newer release, or a pulled one replaced), unless that one
// is in backoff or set aside: then the staged one stays.
func (d *decider) checkedWhileStaged(ev Checked) Action {
	switch {
	case !d.stagedIsOurs():
		return d.staged() // it vanished or was unlocked meanwhile: staged() knows what to do
	case ev.Pulled != nil && ev.Pulled.Checksum == d.st.Locked:
		return d.pulledStaged(ev.Pulled)
	case ev.Err != nil:
		d.st.LastError = fmt.Sprintf("checking for a newer update: %v", ev.Err)
		d.st.NextCheck = d.now.Add(d.pol.Retry.Delay(1, d.obs.Rand))
		return d.staged()
	case ev.Target == nil || ev.Target.Checksum == d.st.Target.Checksum:
		d.st.NextCheck = d.nextCheck()
		return d.staged()
	}
	t := *ev.Target
	if f := d.st.Failures[t.Checksum]; f.SetAside || d.now.Before(f.RetryAt) {
		if !d.obs.UpdateNow {
			d.st.NextCheck = d.nextCheck()
			return d.staged()
		}
		delete(d.st.Failures, t.Checksum) // an operator asked: try again
	}
	d.st.LastError = ""
	d.st.Phase, d.st.Target = state.Staging, t
	act := d.stage()
	act.Reason = fmt.Sprintf("update %s is now offered and replaces staged %s: %s", t.Checksum, d.obs.OS.Staged.Checksum, act.Reason)
	return act
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
	if d.stagedUnlocked() {
		// Any reboot now applies it without a slot: discard it at once
		// and stage the same target again, locked.
		d.st.LastError = d.stagedChange()
		d.st.Phase = state.Staging
		act := d.stage()
		act.Reason = d.st.LastError + "; " + act.Reason
		return act
	}
	if !d.stagedIsOurs() {
		d.st.Phase, d.st.Locked, d.st.NextCheck = state.Idle, "", d.now
		d.st.LastError = d.stagedChange() + "; staging again"
		return d.idle()
	}
	if f := d.st.Failures[d.st.Target.Checksum]; f.SetAside {
		return d.setAsideStaged()
	} else if d.now.Before(f.RetryAt) {
		return d.wait(f.RetryAt, fmt.Sprintf("staged; retrying after failure %d (%s)", f.Count, f.LastError))
	}
	if !d.pol.Window.Contains(d.now) {
		// A newer update can come out while this one waits for the
		// window (zincati#928): keep checking, so the node reboots once,
		// into the newest. Not once it queues for a slot: that would put
		// the reboot off again and again.
		if d.obs.UpdateNow || !d.now.Before(d.st.NextCheck) {
			return Action{Kind: ActCheck, Reason: "staged; checking for a newer update while waiting for the reboot window"}
		}
		next := d.pol.Window.Next(d.now)
		if !next.After(d.now) { // a window that never opens: look again later
			next = d.now.Add(d.pol.CheckInterval)
		}
		reason := "staged; waiting for the reboot window"
		if d.st.NextCheck.Before(next) {
			next, reason = d.st.NextCheck, reason+"; next check for a newer update"
		}
		return d.watchStaged(next, reason)
	}
	if d.pol.RecheckStaged && (d.obs.UpdateNow || !d.now.Before(d.st.NextCheck)) {
		// The release may have been pulled since the last check (while
		// staging, or waiting for the window): ask before queueing.
		return Action{Kind: ActCheck, Reason: "staged; checking that the update source still offers it before queueing for a reboot slot"}
	}
	return Action{Kind: ActQueryOrder, Reason: "checking etcd leadership before queueing"}
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

func (d *decider) onAdopted(ev Adopted) Action {
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
			if !d.stagedIsOurs() {
				d.st.LastError = d.stagedChange()
				d.st.Phase, d.st.Locked = state.Releasing, ""
				return d.release()
			}
			// Hooks may have half run: check quorum and health, then run
			// them again (drain is idempotent).
			d.st.HooksRan = false
			return Action{Kind: ActPrecheck, Reason: "checking etcd quorum and health before running the pre-reboot hooks again after a restart"}
		}
		d.st.Phase = state.WaitingSlot
	}
	if ev.Lease == LeaseHolding {
		return d.decide(SlotHeld{})
	}
	return d.acquire()
}

func (d *decider) onPrechecked(ev Prechecked) Action {
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
	case !d.stagedIsOurs():
		d.st.LastError = d.stagedChange() + " before finalizing"
		d.st.Phase, d.st.Locked = state.Releasing, ""
		return d.release()
	case ev.Refused && d.pol.RequireSafe:
		// Waiting would not help (a 1- or 2-member cluster): give the
		// slot back undrained; the failure count sets the target aside.
		return d.failedHoldingSlot("precheck", fmt.Errorf("%w: %s", ErrRefused, ev.Reason))
	case ev.Gated != "" && !d.st.HooksRan:
		return d.wait(d.now.Add(d.pol.RecheckInterval), "holding the slot, not draining yet; reboot gate: "+ev.Gated)
	case ev.Gated != "":
		return d.wait(d.now.Add(d.pol.RecheckInterval), "holding the slot; reboot gate: "+ev.Gated)
	case !d.st.HooksRan:
		if !ev.Safe && d.pol.RequireSafe {
			return d.wait(d.now.Add(d.pol.RecheckInterval), "holding the slot, not draining yet; not safe to reboot: "+ev.Reason)
		}
		return Action{Kind: ActRunHooks, Reason: "running pre-reboot hooks"}
	case d.st.Noticed.IsZero():
		// Warn first, then wait for logged-in users, then the last checks
		// and the fence: a gate closing or the slot going during the delay
		// is seen before finalizing. No notice of a reboot that must wait.
		if !ev.Safe && d.pol.RequireSafe {
			return d.wait(d.now.Add(d.pol.RecheckInterval), "holding the slot; not safe to reboot: "+ev.Reason)
		}
		d.st.Noticed = d.now
		return Action{Kind: ActNotify, Reason: "telling the people on the host that the reboot is coming"}
	case ev.LoggedIn != 0 && d.now.Before(d.st.Noticed.Add(d.pol.LoggedInDelay)):
		return d.awaitLogout(ev.LoggedIn)
	case ev.Leader && d.pol.MoveLeader:
		return Action{Kind: ActMoveLeader, Reason: "local member is the etcd leader: moving leadership away"}
	case !ev.Safe && d.pol.RequireSafe:
		return d.wait(d.now.Add(d.pol.RecheckInterval), "holding the slot; not safe to reboot: "+ev.Reason)
	}
	return Action{Kind: ActFence, Reason: "proving the reboot slot is still held before finalizing"}
}

// awaitLogout: users are logged in and the logged-in delay since the notice
// runs. Look again every RecheckInterval (the checks run again each time, so
// a gate that closes meanwhile holds the reboot), at the latest at its end.
func (d *decider) awaitLogout(sessions int) Action {
	deadline := d.st.Noticed.Add(d.pol.LoggedInDelay)
	until := d.now.Add(d.pol.RecheckInterval)
	if deadline.Before(until) {
		until = deadline
	}
	who := fmt.Sprintf("%d session(s) logged in", sessions)
	if sessions < 0 {
		who = "cannot count the logged-in sessions"
	}
	return d.wait(until, fmt.Sprintf("holding the slot; %s: rebooting once nobody is logged in, at the latest at %s (reboot.logged_in_delay)",
		who, deadline.UTC().Format(time.RFC3339)))
}

// onFenceDone finalizes only once the slot is proven held: a node cut off from
// etcd whose lease expired (its slot given to another node) must not
// reboot, whatever it believed a moment ago.
func (d *decider) onFenceDone(ev FenceDone) Action {
	switch {
	case errors.Is(ev.Err, ErrSlotLost):
		d.st.LastError = "the reboot slot was lost before finalizing: " + ev.Err.Error()
		return d.backToStaged()
	case ev.Err != nil:
		return d.retry("proving the reboot slot is held before finalizing", ev.Err)
	case !d.st.HooksRan:
		return Action{Kind: ActPrecheck, Reason: "checking etcd quorum and health before the pre-reboot hooks"}
	case d.st.Noticed.IsZero():
		return d.lastChecks() // stale: the people on the host are told first
	case !d.pol.Window.Contains(d.now):
		d.st.Phase = state.Releasing
		d.st.LastError = "the reboot window closed before finalizing"
		return d.release()
	case !d.stagedIsOurs():
		d.st.LastError = d.stagedChange() + " before finalizing"
		d.st.Phase, d.st.Locked = state.Releasing, ""
		return d.release()
	}
	d.st.Phase = state.Finalizing
	return Action{Kind: ActFinalize, Reason: "finalizing " + d.st.Locked + " and rebooting"}
}

func (d *decider) onFinalizeDone(ev FinalizeDone) Action {
	switch {
	case ev.Err == nil:
		return d.wait(d.now.Add(d.pol.RebootTimeout), "rebooting into "+d.st.Target.Checksum)
	case errors.Is(ev.Err, ErrNoStagedDeployment):
		d.st.Phase, d.st.Locked, d.st.NextCheck = state.Releasing, "", d.now
		d.st.LastError = ev.Err.Error() // OS.Finalize's errors say "finalizing"
		return d.release()
	case errors.Is(ev.Err, ErrInhibited):
		// A refused finalize did not unlock: keep the staged update.
		return d.failedHoldingSlot("finalize", ev.Err)
	case errors.Is(ev.Err, ErrBusy):
		// Refused before anything changed (the staged update is still
		// locked) while somebody else's transaction runs: not a failure.
		// Keep the slot and go through the last checks again after it.
		d.st.Phase, d.st.LastError = state.HoldingSlot, ev.Err.Error()
		return d.wait(d.now.Add(d.pol.RecheckInterval), "busy: "+ev.Err.Error()+"; finalizing again after it")
	}
	// Already unlocked, another checksum, or unknown: the staged deployment
	// may be unlocked. Discard it and stage again; the failure count bounds
	// how often.
	act := d.fail("finalize", ev.Err)
	return d.abortFinalize().withFailure(act)
}

// failedHoldingSlot records a failure of a step taken while holding the slot
// with the update staged and still locked (a hook, an inhibitor refusing the
// finalize). The slot goes back and the announcement is withdrawn: a leader
// letting followers go first must not wait for a node that only retries
// hours later (it announces again when it queues again). A target that has
// now failed updates.max_attempts times is set aside like any other.
func (d *decider) failedHoldingSlot(step string, err error) Action {
	act := d.fail(step, err)
	d.st.Phase = state.Releasing
	if d.st.Failures[d.st.Target.Checksum].SetAside {
		d.st.Locked = "" // released() then discards the staged deployment
	}
	next := d.release()
	if next.Kind == ActRelease {
		next.Withdraw = true
	}
	return next.withFailure(act)
}

// setAsideStaged gives up on a staged target that failed too often: the
// staged deployment is discarded and the node goes back to checking, where
// the set-aside target is reported until a newer one appears or an operator
// runs update-now.
func (d *decider) setAsideStaged() Action {
	f := d.st.Failures[d.st.Target.Checksum]
	d.st.Phase, d.st.Locked, d.st.NextCheck = state.Idle, "", d.nextCheck()
	d.st.LastError = fmt.Sprintf("update %s set aside after %d failures (last: %s)", d.st.Target.Checksum, f.Count, f.LastError)
	if d.obs.OS.Staged != nil {
		return Action{Kind: ActCleanup, Reason: d.st.LastError + "; discarding its staged deployment"}
	}
	return d.idle()
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
		act := d.fail("verify", fmt.Errorf("booted %s after finalizing, expected %s", b, d.st.Target.Checksum))
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
	if d.unlockedStaged() {
		// Any reboot, planned or not, would apply it: with the slot gone,
		// another node could be down at the same time.
		return Action{Kind: ActCleanup, Reason: "discarding staged deployment " + d.obs.OS.Staged.Checksum + " before giving the slot back: the agent does not (or no longer) hold it locked"}
	}
	return Action{Kind: ActRelease, Reason: "releasing the reboot slot", Withdraw: d.st.Locked == ""}
}

// unlockedStaged: a deployment is staged that the agent does not hold
// locked (finalized, someone else's, unlocked behind its back, or about to
// be discarded).
func (d *decider) unlockedStaged() bool {
	return d.obs.OS.Staged != nil && !d.stagedIsOurs()
}

// stagedIsOurs: the staged deployment is the one the agent locked, and the
// host still shows it locked.
func (d *decider) stagedIsOurs() bool {
	s := d.obs.OS.Staged
	return s != nil && d.st.Locked != "" && s.Checksum == d.st.Locked && !s.Unlocked
}

// stagedUnlocked: the deployment the agent staged locked is still staged,
// but its lock is gone and the agent did not finalize it.
func (d *decider) stagedUnlocked() bool {
	s := d.obs.OS.Staged
	return s != nil && d.st.Locked != "" && s.Checksum == d.st.Locked && s.Unlocked
}

// stagedChange says why the staged deployment is no longer the agent's.
func (d *decider) stagedChange() string {
	switch s := d.obs.OS.Staged; {
	case s == nil:
		return "the staged deployment disappeared"
	case d.stagedUnlocked():
		return fmt.Sprintf("staged deployment %s was unlocked outside the agent (bootc's update timer, `bootc upgrade`, "+
			"`rpm-ostree finalize-deployment`?): any reboot would apply it without a reboot slot; discarding it", s.Checksum)
	default:
		return fmt.Sprintf("the staged deployment changed (%s staged, %s locked by the agent)", s.Checksum, d.st.Locked)
	}
}

// watchStaged waits until at the latest, looking at the host every
// WatchStaged meanwhile (stagedUnlocked).
func (d *decider) watchStaged(until time.Time, reason string) Action {
	if w := d.pol.WatchStaged; w > 0 && until.After(d.now.Add(w)) {
		until = d.now.Add(w)
	}
	return d.wait(until, reason)
}

func (d *decider) released() Action {
	s := d.obs.OS.Staged
	switch {
	case d.stagedIsOurs():
		d.st.Phase = state.Staged
		return d.staged()
	case s != nil && d.st.Phase != state.Idle:
		// Not ours, possibly unlocked, or set aside: never leave it for an
		// unplanned reboot to apply.
		d.st.Phase, d.st.Locked = state.Idle, ""
		if f := d.st.Failures[d.st.Target.Checksum]; f.SetAside && s.Checksum == d.st.Target.Checksum {
			return Action{Kind: ActCleanup, Reason: fmt.Sprintf("update %s set aside after %d failures; discarding its staged deployment", s.Checksum, f.Count)}
		}
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
	// The port's error says what was being done; step labels the failure
	// (log, metrics) without repeating it in the text.
	f.LastError = err.Error()
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
