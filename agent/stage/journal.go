package stage

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/update-agent/update-agent/agent/atomicfile"
	"github.com/update-agent/update-agent/agent/state"
	"github.com/update-agent/update-agent/agent/systemd"
)

// journal records what a staging run changed, written before each change
// (so a crash in between still leaves a record) and removed once all is
// undone. Every undo step tolerates a change that never happened.
type journal struct {
	// BootID is the boot the window was opened in. Units, frozen state,
	// runtime properties and the drop-in under /run do not outlive it; a
	// record of an earlier boot is not applied to this one.
	BootID      string `json:"boot_id,omitempty"`
	StagingUnit string `json:"staging_unit,omitempty"`
	DaemonUnit  string `json:"daemon_unit,omitempty"`
	// Scheduler: iosched has its own state file; this says to restore it.
	Scheduler bool `json:"scheduler,omitempty"`
	// IOCost: agent/iocost has its own record; this says to restore it.
	IOCost bool `json:"iocost,omitempty"`
	// DropIn is the runtime drop-in written for DaemonUnit.
	DropIn string `json:"drop_in,omitempty"`
	// DaemonRestarted: the daemon was restarted to take the policy, so it
	// is restarted again (when idle) to drop it.
	DaemonRestarted bool `json:"daemon_restarted,omitempty"`
	// Runtime are properties set with SetUnitProperties(runtime=true).
	Runtime []runtimeChange `json:"runtime,omitempty"`
	// Fsync is the repo whose core.per-object-fsync was set.
	Fsync *fsyncChange `json:"fsync,omitempty"`
	// Foreign: the window was opened around somebody else's transaction
	// (PaceForeign); nothing of it is stopped or cancelled on undo.
	Foreign *foreignRecord `json:"foreign,omitempty"`
}

// foreignRecord is the transaction a foreign window paced.
type foreignRecord struct {
	Method string    `json:"method"`
	Sender string    `json:"sender,omitempty"`
	Path   string    `json:"path,omitempty"`
	Found  time.Time `json:"found"`
}

// runtimeChange is one unit's runtime properties: the values to set back,
// and systemd's control files that did not exist before (to remove).
type runtimeChange struct {
	Unit   string              `json:"unit"`
	Old    []systemd.SavedProp `json:"old"`
	Remove []string            `json:"remove,omitempty"`
}

type fsyncChange struct {
	Repo string `json:"repo"`
	// Old is the value before; WasSet false means the key was unset.
	Old    string `json:"old,omitempty"`
	WasSet bool   `json:"was_set"`
}

func (s *Stager) journalPath() string {
	return filepath.Join(s.o.StateDir, "staging-undo.json")
}

func (s *Stager) saveJournal(j *journal) error {
	if err := atomicfile.WriteJSON(s.journalPath(), j); err != nil {
		return fmt.Errorf("recording staging changes: %w", err)
	}
	return nil
}

func (s *Stager) loadJournal() (*journal, error) {
	var j journal
	found, err := atomicfile.ReadJSON(s.journalPath(), &j)
	if errors.Is(err, atomicfile.ErrCorrupt) {
		return s.setAsideJournal(err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading staging changes: %w", err)
	}
	if !found {
		return nil, nil
	}
	return &j, nil
}

// setAsideJournal: a journal that does not parse would fail every recovery
// until an operator deleted it. It is set aside (doctor fails while it is
// there) and replaced by what this stager knows it may have changed
// without it: its own units (thawed, a running staging unit stopped), the
// daemon's drop-in (its name is fixed) and the scheduler (iosched keeps its
// own record). The old values of the repo's per-object fsync setting and of
// the daemon's runtime properties were only in the journal: they stay as
// they are (fsync on is the durable setting; runtime properties end with
// the boot).
func (s *Stager) setAsideJournal(readErr error) (*journal, error) {
	to, err := atomicfile.SetAside(s.journalPath(), atomicfile.Corrupt, time.Now())
	if err != nil {
		return nil, fmt.Errorf("reading staging changes: %w (and %w)", readErr, err)
	}
	s.log.Error("staging undo record unreadable: set aside; undoing what the stager knows without it (units, drop-in, scheduler); the repo's core.per-object-fsync and rpm-ostreed's runtime properties stay as they are; delete the file once checked",
		"set_aside", to, "err", readErr)
	j := &journal{BootID: s.bootID(), StagingUnit: s.o.StagingUnit, DaemonUnit: s.o.DaemonUnit,
		Scheduler: s.o.Scheduler != "" || s.o.NrRequests > 0 || s.o.MaxSectorsKB > 0}
	if s.o.DaemonUnit != "" {
		j.DropIn = systemd.DropInPath(s.o.RuntimeUnitDir, s.o.DaemonUnit, DropInName)
	}
	return j, nil
}

func (s *Stager) removeJournal() error {
	if err := atomicfile.Remove(s.journalPath()); err != nil {
		return fmt.Errorf("removing staging changes: %w", err)
	}
	return nil
}

// bootID is the current boot's ID, "" when it cannot be read (then records
// are taken as this boot's, as before boot IDs were kept).
func (s *Stager) bootID() string {
	id, err := state.ReadBootID(s.o.BootIDPath)
	if err != nil {
		s.log.Warn("staging records kept without a boot ID to check them against", "err", err)
		return ""
	}
	return id
}

// dropEarlierBoot clears from j what the reboot since it was written has
// already undone: what is left is persistent (the repo's fsync setting;
// the scheduler keeps its own boot-checked record).
func (s *Stager) dropEarlierBoot(j *journal) {
	boot := s.bootID()
	if j.BootID == "" || boot == "" || j.BootID == boot {
		return
	}
	s.log.Warn("dropping the runtime records of a staging in an earlier boot; the reboot undid them",
		"recorded_boot_id", j.BootID, "staging_unit", j.StagingUnit, "daemon_unit", j.DaemonUnit, "runtime_units", len(j.Runtime))
	j.StagingUnit, j.DaemonUnit, j.DropIn, j.DaemonRestarted, j.Runtime = "", "", "", false, nil
}
