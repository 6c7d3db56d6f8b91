// Package state is the agent's own record of an update in flight, persisted
// atomically in the state directory (/var/lib/update-agent) so that a kill -9
// at any point resumes where it left off. It is the only source for what the
// agent locked: rpm-ostree's status has no reliable finalization-locked key.
package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/update-agent/update-agent/agent/atomicfile"
)

// FileName is the record's name inside the state directory.
const FileName = "engine.json"

// schemaVersion changes when a field changes meaning; an unknown version is
// an error rather than a guess.
const schemaVersion = 1

// Phase is where the update in flight is. Each phase is written before the
// step it names starts (a write-ahead record), so a restart knows what may
// have been half done.
type Phase string

const (
	// Idle: nothing in flight; the agent checks for updates on schedule.
	Idle Phase = "idle"
	// Staging: staging Target began; on restart the stager's undo runs and
	// rpm-ostree's status says whether it finished.
	Staging Phase = "staging"
	// Staged: Target is staged and locked for finalization by the agent;
	// waiting for a reboot window.
	Staged Phase = "staged"
	// WaitingSlot: queued (or about to queue) for a reboot slot.
	WaitingSlot Phase = "waiting_slot"
	// HoldingSlot: the slot is held; pre-reboot hooks and the last checks run.
	HoldingSlot Phase = "holding_slot"
	// Finalizing: finalize-deployment is (being) issued from boot BootID.
	Finalizing Phase = "finalizing"
	// Verifying: booted again after finalizing; checking the booted
	// deployment and the etcd member before giving the slot back.
	Verifying Phase = "verifying"
	// Releasing: giving the slot back (after success, a failed hook, a
	// closed window...); on restart the release is simply repeated.
	Releasing Phase = "releasing"
)

// Phases lists every phase, in flow order (metrics export one series each).
var Phases = []Phase{Idle, Staging, Staged, WaitingSlot, HoldingSlot, Finalizing, Verifying, Releasing}

// Target is an update: the checksum finalize-deployment expects (base
// checksum, checksum, or image digest) and a version for humans.
type Target struct {
	Checksum string `json:"checksum"`
	Version  string `json:"version,omitempty"`
}

// Failure is the failure record of one target.
type Failure struct {
	Count     int       `json:"count"`
	LastError string    `json:"last_error,omitempty"`
	Last      time.Time `json:"last"`
	RetryAt   time.Time `json:"retry_at"`
	// SetAside: the target failed too often; it is reported and not tried
	// again until a newer target appears or an operator runs update-now.
	SetAside bool `json:"set_aside,omitempty"`
}

// State is the persisted record.
type State struct {
	Version int    `json:"version"`
	Phase   Phase  `json:"phase"`
	Target  Target `json:"target"`
	// Locked is the checksum of the staged deployment the agent staged with
	// --lock-finalization; empty when the agent has nothing staged.
	Locked string `json:"locked,omitempty"`
	// Queued: this node may have an entry in the reboot-slot queue. Set
	// before queueing starts; cleared only once Release succeeded or Adopt
	// found no entry, so a restart never forgets a slot it holds.
	Queued bool `json:"queued,omitempty"`
	// LeaseID is the etcd lease behind the entry once it holds a slot (for
	// operators; the lock keeps its own record to re-adopt it).
	LeaseID int64 `json:"lease_id,omitempty"`
	// BootID is the boot the record was written in: a different boot ID at
	// start means the host rebooted since (planned when Finalizing).
	BootID string `json:"boot_id,omitempty"`
	// HooksRan: the pre-reboot hooks ran while holding the current slot
	// (HoldingSlot only): the next checks are the last before finalizing.
	// Before the hooks, quorum and health are checked first, so a node
	// never drains only to find it may not reboot.
	HooksRan bool `json:"hooks_ran,omitempty"`
	// Noticed: when the people on the host were told that the reboot is
	// coming (HoldingSlot, after the hooks). The last checks and the fence
	// follow once nobody is logged in, or reboot.logged_in_delay after it.
	Noticed time.Time `json:"noticed,omitzero"`
	// CheckHealth: the host went down while this node held a slot; the
	// local etcd member must be healthy again before the slot is released.
	CheckHealth bool `json:"check_health,omitempty"`
	// Announced: the etcd members seen with an update pending since this
	// node staged its own (Staged to HoldingSlot): they found the update.
	// A leader's leader.followers_grace waits only for members never seen,
	// not for those that have updated and withdrawn since.
	Announced []string `json:"announced,omitempty"`
	// Since is when the phase was entered.
	Since time.Time `json:"since"`
	// NextCheck is when the next check for updates is due (Idle).
	NextCheck time.Time `json:"next_check"`
	// Failures per target checksum; a success clears the target's record.
	Failures map[string]Failure `json:"failures,omitempty"`
	// LastError is the last step's error, for status.
	LastError string `json:"last_error,omitempty"`
}

// Clone returns a deep copy (Failures is a map, Announced a slice).
func (s State) Clone() State {
	c := s
	c.Announced = slices.Clone(s.Announced)
	if s.Failures != nil {
		c.Failures = make(map[string]Failure, len(s.Failures))
		for k, v := range s.Failures {
			c.Failures[k] = v
		}
	}
	return c
}

// Equal reports whether two records would persist the same bytes.
func (s State) Equal(o State) bool {
	a, _ := json.Marshal(s)
	b, _ := json.Marshal(o)
	return bytes.Equal(a, b)
}

// Store reads and writes the record in Dir.
type Store struct {
	Dir string
}

// Path is the record's file.
func (s Store) Path() string { return filepath.Join(s.Dir, FileName) }

// Load returns the persisted record, or an Idle record when there is none.
func (s Store) Load() (State, error) {
	var st State
	found, err := atomicfile.ReadJSONStrict(s.Path(), &st)
	if err != nil {
		return State{}, fmt.Errorf("reading state: %w", err)
	}
	if !found {
		return State{Version: schemaVersion, Phase: Idle}, nil
	}
	if st.Version != schemaVersion {
		return State{}, fmt.Errorf("reading state %s: unknown version %d (this agent writes %d)", s.Path(), st.Version, schemaVersion)
	}
	if !validPhase(st.Phase) {
		return State{}, fmt.Errorf("reading state %s: unknown phase %q", s.Path(), st.Phase)
	}
	return st, nil
}

func validPhase(p Phase) bool {
	for _, q := range Phases {
		if p == q {
			return true
		}
	}
	return false
}

// Save persists st atomically: a temp file in the same directory, fsync,
// rename over the record, fsync of the directory. A crash leaves either the
// old record or the new one, never a torn one.
func (s Store) Save(st State) error {
	st.Version = schemaVersion
	if err := atomicfile.WriteJSON(s.Path(), st); err != nil {
		return fmt.Errorf("saving state: %w", err)
	}
	return nil
}

// BootIDPath is where Linux publishes the current boot's random ID.
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// ReadBootID returns the boot ID published at path (BootIDPath on a host).
func ReadBootID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading boot ID: %w", err)
	}
	id := string(bytes.TrimSpace(b))
	if id == "" {
		return "", fmt.Errorf("reading boot ID: %s is empty", path)
	}
	return id, nil
}
