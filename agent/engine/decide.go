package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/update-agent/update-agent/agent/state"
)

// Decide is the engine's pure core: from the persisted record, what just
// happened and what the engine sees now, it returns the record to persist
// and the next action. The engine persists the record BEFORE acting on it,
// so the record always names the step that may be half done.
//
// The flow, in order: check -> stage gently (locked) -> wait for a window ->
// take a slot (followers first) -> check quorum and health -> pre-reboot
// hooks -> tell the people on the host -> wait for logged-in users (up to
// the logged-in delay) -> re-check window, gates, leadership and quorum ->
// fence the slot -> finalize (reboot) -> after boot: booted is the target
// and the member is healthy -> release. Which step handles which event in which phase is the
// table in flow.go; FLOW.md shows it with the trace of a whole cycle.
func Decide(st state.State, ev Event, obs Obs, pol Policy, now time.Time) (state.State, Action) {
	d := decider{st: st.Clone(), obs: obs, pol: pol, now: now}
	if d.pol.Window == nil {
		d.pol.Window = Always{}
	}
	act := d.decide(ev)
	if d.st.Phase != state.HoldingSlot {
		d.st.HooksRan = false
	}
	if d.st.Phase == state.Idle || d.st.Phase == state.Staging {
		d.st.Announced = nil // heard for the update staged before
	}
	if !d.st.HooksRan {
		d.st.Noticed = time.Time{} // told again after the hooks run again
	}
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

// The event steps, in flow order (flow.go says in which phases each one
// runs); the longer ones live in steps.go.

func (d *decider) onStarted(Started) Action {
	d.afterRestart()
	return Action{Kind: ActRecover, Reason: "restoring what an interrupted staging may have left"}
}

func (d *decider) retryRecovery(ev Event) (Action, bool) {
	if err := ev.(Recovered).Err; err != nil {
		return d.retry("restoring after an interrupted staging", err), true
	}
	return Action{}, false
}

func (d *decider) recoverFirst(Event) (Action, bool) {
	if !d.obs.Recovered {
		return Action{Kind: ActRecover, Reason: "retrying the restore of an interrupted staging"}, true
	}
	return Action{}, false
}

func (d *decider) onCleanedUp(ev CleanedUp) Action {
	if ev.Err != nil {
		return d.retry("discarding the staged deployment", ev.Err)
	}
	if d.unlockedStaged() && d.st.Phase == state.Releasing && d.st.Queued {
		return d.retry("discarding the staged deployment", fmt.Errorf("%s is still staged after the cleanup; keeping the slot", d.obs.OS.Staged.Checksum))
	}
	if d.st.Phase == state.Staging {
		return Action{Kind: ActStage, Reason: "staging " + d.st.Target.Checksum}
	}
	if d.st.Phase == state.Releasing {
		return d.release()
	}
	return d.idle()
}

func (d *decider) onStageDone(ev StageDone) Action {
	if errors.Is(ev.Err, ErrBusy) {
		// Not the update's fault: no failure, staging again once the
		// other transaction is over.
		d.st.Phase = state.Idle
		d.st.LastError = ev.Err.Error()
		d.st.NextCheck = d.now.Add(d.pol.RecheckInterval)
		return d.wait(d.st.NextCheck, "busy: "+ev.Err.Error()+"; staging again after it")
	}
	var p PulledRelease
	if errors.As(ev.Err, &p) {
		// Staging found the release not to be had (an update graph's
		// release on another stream): set aside and discarded as a
		// pulled one, not a failure of this node.
		return d.pulledStaged(&Pulled{Checksum: p.PulledChecksum(), Message: ev.Err.Error()})
	}
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
	if s.Unlocked {
		act := d.fail("stage", fmt.Errorf("staging left %s staged without its finalization lock: any reboot would apply it", s.Checksum))
		d.st.Phase, d.st.Locked = state.Idle, ""
		d.st.NextCheck = d.st.Failures[d.st.Target.Checksum].RetryAt
		return Action{Kind: ActCleanup, Reason: "discarding " + s.Checksum + ": staged without its finalization lock"}.withFailure(act)
	}
	// The target is what got staged: an upgrade may have found a
	// newer commit than the check did.
	if s.Checksum != d.st.Target.Checksum {
		d.st.Target = state.Target{Checksum: s.Checksum, Version: s.Version}
	}
	d.st.Phase, d.st.Locked, d.st.LastError = state.Staged, s.Checksum, ""
	d.st.NextCheck = d.nextCheck()
	if d.pol.RecheckStaged {
		d.st.NextCheck = d.now // staging takes a while: the release may be pulled meanwhile
	}
	return d.staged()
}

func (d *decider) onOrderQueried(ev OrderQueried) Action {
	if ev.Err != nil {
		return d.retry("asking etcd for the leader", ev.Err)
	}
	d.heard(ev.Pending)
	if !ev.MayQueue {
		return d.wait(d.now.Add(d.pol.RecheckInterval), "not queueing for a reboot slot yet: "+ev.Reason)
	}
	var silent []string
	for _, m := range ev.Unannounced {
		if !slices.Contains(d.st.Announced, m) {
			silent = append(silent, m)
		}
	}
	if act, ok := d.awaitAnnouncements(silent); ok {
		return act
	}
	return d.acquire()
}

// heard records the members seen with an update pending: they found it,
// and once they have updated and withdrawn, a leader does not wait for them
// again (awaitAnnouncements).
func (d *decider) heard(pending []string) {
	for _, m := range pending {
		if m != "" && !slices.Contains(d.st.Announced, m) {
			d.st.Announced = append(d.st.Announced, m)
		}
	}
	slices.Sort(d.st.Announced)
}

// awaitAnnouncements: a leader may queue because no other member has an
// update pending, but members never seen announcing one since it staged may
// just not have found it yet (their check came a moment later, or took
// longer): the leader would reboot first and leadership move twice. Until
// FollowersGrace after this node staged (the record's Since, persisted), it
// looks again every RecheckInterval; once they announce, the leader rule
// holds it back. The wait is bounded: a member whose agent is down, or that
// never gets the update, delays the leader by the grace once.
func (d *decider) awaitAnnouncements(members []string) (Action, bool) {
	until := d.st.Since.Add(d.pol.FollowersGrace)
	if len(members) == 0 || !d.now.Before(until) {
		return Action{}, false
	}
	next := d.now.Add(d.pol.RecheckInterval)
	if until.Before(next) {
		next = until
	}
	return d.wait(next, fmt.Sprintf(
		"local member is the etcd leader; giving %s until %s to announce an update before queueing (leader.followers_grace)",
		strings.Join(members, ", "), until.UTC().Format(time.RFC3339))), true
}

func (d *decider) onSlotHeld(ev SlotHeld) Action {
	if ev.Err != nil {
		return d.retry("waiting for a reboot slot", ev.Err)
	}
	if ev.LeaseID != 0 {
		d.st.LeaseID = ev.LeaseID
	}
	d.st.Phase, d.st.HooksRan = state.HoldingSlot, false
	if d.pol.RecheckStaged {
		// The wait in line may have been long: the release may have been
		// pulled meanwhile. Ask before draining for it.
		return Action{Kind: ActCheck, Reason: "holding the slot; checking that the update source still offers the staged release before the pre-reboot hooks"}
	}
	return Action{Kind: ActPrecheck, Reason: "checking etcd quorum and health before the pre-reboot hooks"}
}

func (d *decider) onHooksDone(ev HooksDone) Action {
	if ev.Err != nil {
		return d.failedHoldingSlot("hooks", ev.Err)
	}
	d.st.HooksRan = true
	return Action{Kind: ActPrecheck, Reason: "checking again before telling the people on the host"}
}

// onNoticeDone: the people on the host were told. The last checks follow;
// while users are logged in they wait first (onPrechecked), so the gates,
// quorum and the fence are looked at after the delay, not before it.
func (d *decider) onNoticeDone(NoticeDone) Action {
	return Action{Kind: ActPrecheck, Reason: "told the people on the host; last checks before finalizing"}
}

func (d *decider) onLeaderMoved(ev LeaderMoved) Action {
	if ev.Err != nil {
		return d.retry("moving etcd leadership away", ev.Err)
	}
	return Action{Kind: ActPrecheck, Reason: "leadership moved; checking again"}
}

func (d *decider) onVerifyDone(ev VerifyDone) Action {
	switch {
	case ev.Err != nil:
		return d.retry("checking the local etcd member", ev.Err)
	case ev.BootPending:
		return d.wait(d.now.Add(d.pol.RecheckInterval), "holding the slot until systemd reports the boot complete (boot-complete.target)")
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
	act := d.release()
	act.Rebooted = act.Kind == ActRelease // the group's spacing starts now
	return act
}

func (d *decider) onReleased(ev Released) Action {
	if ev.Err != nil {
		return d.retry("releasing the reboot slot", ev.Err)
	}
	d.st.Queued, d.st.LeaseID = false, 0
	return d.released()
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

// resumeStaging: a new process finds the record staging.
func (d *decider) resumeStaging() Action {
	if s := d.obs.OS.Staged; s != nil && s.Checksum == d.st.Target.Checksum && !s.Unlocked {
		// Staging finished before the crash. Only our own locked
		// staging can have made it: a staged deployment we did not
		// make is discarded before staging starts.
		d.st.Phase, d.st.Locked = state.Staged, d.st.Target.Checksum
		return d.staged()
	}
	return d.stage()
}

// resumeLease: a new process finds the record waiting for, holding or
// verifying after a slot; a persisted lease is re-adopted first.
func (d *decider) resumeLease() Action {
	if d.st.Queued {
		return Action{Kind: ActAdopt, Reason: "re-adopting reboot-slot lease"}
	}
	if d.st.Phase == state.Verifying {
		return d.verify()
	}
	return d.backToStaged()
}

// lastChecks: holding the slot, look again (quorum, gates, leadership)
// before the next step towards finalizing.
func (d *decider) lastChecks() Action {
	return Action{Kind: ActPrecheck, Reason: "last checks before finalizing"}
}

// resumeFinalizing: a new process in the boot that issued (or was about to
// issue) finalize-deployment. It may have run: the staged deployment may be
// unlocked, and any reboot would apply it. Never finalize blind, never
// give the slot back while it is staged: discard it first.
func (d *decider) resumeFinalizing() Action {
	d.st.LastError = "agent restarted in the boot that finalized (or was about to): the staged deployment may be unlocked; discarding it before giving the slot back"
	return d.abortFinalize()
}

// awaitReboot: finalize-deployment succeeded; the reboot should follow
// within RebootTimeout, measured on this process's monotonic clock
// (Obs.RebootWait). Once it is overdue in the same boot, the staged
// deployment is unlocked and ANY later reboot would apply it: it is
// discarded, and release() keeps the slot until rpm-ostree shows it gone.
// Not finalized by this process (a stale tick): the same, like a restart.
func (d *decider) awaitReboot() Action {
	if !d.obs.FinalizedHere {
		d.st.LastError = "finalize-deployment was not seen to succeed in this process and the boot has not changed"
		return d.abortFinalize()
	}
	if left := d.pol.RebootTimeout - d.obs.RebootWait; left > 0 {
		return d.wait(d.now.Add(left), "rebooting into "+d.st.Target.Checksum)
	}
	act := d.fail("finalize", fmt.Errorf("no reboot %s after finalize-deployment (same boot %s, monotonic clock): the unlocked staged deployment would be applied by any reboot, so it is discarded before the slot is given back",
		d.obs.RebootWait.Round(time.Second), d.obs.BootID))
	return d.abortFinalize().withFailure(act)
}
