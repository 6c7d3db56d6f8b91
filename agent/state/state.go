// Package state is the agent's own record of an update in flight, persisted
// atomically in the state directory (/var/lib/update-agent) so that a kill -9
// at any point resumes where it left off. It is the only source for what the
// agent locked: rpm-ostree's status has no reliable finalization-locked key.
package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/update-agent/update-agent/agent/atomicfile"
)

// FileName is the record's name inside the state directory.
const FileName = "engine.json"

// The record's schema is versioned "version.minor". version (the major)
// changes when a field changes meaning or goes: a reader of another major
// cannot trust any field. minor changes when fields are only added: a
// reader of the same major and a lower minor reads the fields it knows and
// drops the others (an agent after an OS rollback meeting its successor's
// record). The minor is left out of the file while it is 0, so agents from
// before it was kept (which refuse unknown fields) read such records. 1.1
// added Target.Image and Target.Stream (an update graph's release).
const (
	schemaVersion = 1
	schemaMinor   = 1
)

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
	// Image is an update graph's OCI release pinned by digest ("" for any
	// other): staging it may rebase to its name (graph.RebaseRef).
	Image string `json:"image,omitempty"`
	// Stream is the update stream the graph was asked for: what got
	// staged must be on it.
	Stream string `json:"stream,omitempty"`
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
	Version int `json:"version"`
	// Minor: fields added since (see schemaVersion).
	Minor  int    `json:"minor,omitempty"`
	Phase  Phase  `json:"phase"`
	Target Target `json:"target"`
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
	// Log gets the line saying that a record was set aside (Load); nil:
	// slog's default.
	Log *slog.Logger
	// Now names a set-aside record (default time.Now).
	Now func() time.Time
}

// Path is the record's file.
func (s Store) Path() string { return filepath.Join(s.Dir, FileName) }

// Load returns the persisted record, or an Idle record when there is none.
//
// It never fails on the record's content, so the agent never restarts in a
// loop on it: a record that does not parse, of an unknown phase, or of a
// newer major version is set aside (engine.json.corrupt-<time> or
// .newer-<time>; doctor fails while it is there) and Load returns, and
// persists, a record that starts from the host's actual state
// conservatively (FromHost). A record of the same major and a newer minor
// is read for the fields this agent knows. Only an I/O error is an error.
func (s Store) Load() (State, error) {
	var head struct {
		Version int `json:"version"`
		Minor   int `json:"minor"`
	}
	found, err := atomicfile.ReadJSON(s.Path(), &head)
	switch {
	case errors.Is(err, atomicfile.ErrCorrupt):
		return s.setAside(atomicfile.Corrupt, err.Error())
	case err != nil:
		return State{}, fmt.Errorf("reading state: %w", err)
	case !found:
		return State{Version: schemaVersion, Phase: Idle}, nil
	case head.Version > schemaVersion:
		return s.setAside(atomicfile.Newer, fmt.Sprintf("written by a newer agent in schema %d.%d; this agent reads %d.x", head.Version, head.Minor, schemaVersion))
	case head.Version != schemaVersion:
		return s.setAside(atomicfile.Corrupt, fmt.Sprintf("unknown schema version %d (this agent reads %d)", head.Version, schemaVersion))
	}
	var st State
	read := atomicfile.ReadJSONStrict
	if head.Minor > schemaMinor {
		read = atomicfile.ReadJSON // a newer minor only added fields
	}
	if _, err := read(s.Path(), &st); err != nil {
		if errors.Is(err, atomicfile.ErrCorrupt) {
			return s.setAside(atomicfile.Corrupt, err.Error())
		}
		return State{}, fmt.Errorf("reading state: %w", err)
	}
	if !validPhase(st.Phase) {
		return s.setAside(atomicfile.Corrupt, fmt.Sprintf("unknown phase %q", st.Phase))
	}
	if head.Minor > schemaMinor {
		s.log().Warn("engine record written by a newer agent of the same schema: read for the fields this agent knows; the others are dropped when it is next saved",
			"path", s.Path(), "schema", fmt.Sprintf("%d.%d", head.Version, head.Minor), "reads", fmt.Sprintf("%d.%d", schemaVersion, schemaMinor))
	}
	return st, nil
}

// FromHost is the record a new agent starts from when the persisted one
// cannot be used: whatever the other record said, this node may hold a
// slot, and a staged deployment may be unlocked (finalize-deployment
// ran). Releasing with the slot possibly held and the member's health to
// check: the engine checks boot and member health, discards any staged
// deployment it does not hold locked, gives back whatever slot this node
// holds, then checks for updates. It never finalizes from here: that
// takes a slot taken anew.
func FromHost(why string) State {
	return State{Version: schemaVersion, Minor: schemaMinor, Phase: Releasing, Queued: true, CheckHealth: true, LastError: why}
}

func (s Store) setAside(kind, why string) (State, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	to, err := atomicfile.SetAside(s.Path(), kind, now())
	if err != nil {
		return State{}, fmt.Errorf("reading state: %s: %w", why, err)
	}
	st := FromHost(fmt.Sprintf("the engine record was set aside as %s (%s); started from the host's state", to, why))
	if err := s.Save(st); err != nil {
		return State{}, err
	}
	s.log().Error("engine record unusable: set aside; starting from the host's state: any staged deployment the agent does not hold locked is discarded and any slot this node holds released once the local member is healthy; nothing is finalized without a new slot",
		"set_aside", to, "reason", why)
	return st, nil
}

func (s Store) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
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
	st.Version, st.Minor = schemaVersion, schemaMinor
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
