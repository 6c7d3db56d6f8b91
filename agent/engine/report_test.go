package engine

import (
	"context"
	"testing"

	"github.com/update-agent/update-agent/agent/state"
)

type reportingStager struct {
	Stager
	last *StagingReport
}

func (r reportingStager) LastStaging() *StagingReport { return r.last }

type reportingLock struct {
	Lock
	pos *QueuePosition
}

func (r reportingLock) Position() *QueuePosition { return r.pos }

type fixedStore struct{ st state.State }

func (f fixedStore) Load() (state.State, error) { return f.st, nil }
func (fixedStore) Save(state.State) error       { return nil }

// Status reads the ports' reports through the snapshot: the last staging
// always, the place in line only while waiting for a slot.
func TestSnapshotCarriesPortReports(t *testing.T) {
	rep := &StagingReport{Seconds: 12, OK: true, Freezes: 3}
	pos := &QueuePosition{Ahead: 2, Slots: 1}
	for _, tc := range []struct {
		phase   state.Phase
		wantPos bool
	}{{state.Staged, false}, {state.WaitingSlot, true}, {state.HoldingSlot, false}} {
		e := New(Options{Stager: reportingStager{last: rep}, Lock: reportingLock{Lock: NoLock{}, pos: pos}, Store: fixedStore{}})
		e.snap.State = state.State{Phase: tc.phase}
		s := e.Snapshot()
		if s.LastStaging != rep {
			t.Errorf("%s: last staging %v, want the stager's", tc.phase, s.LastStaging)
		}
		if got := s.Position != nil; got != tc.wantPos {
			t.Errorf("%s: position %v, want shown=%v", tc.phase, s.Position, tc.wantPos)
		}
	}
	// Ports that report nothing leave the sections out.
	e := New(Options{Stager: plainStager{}, Store: fixedStore{}})
	if s := e.Snapshot(); s.LastStaging != nil || s.Position != nil {
		t.Errorf("snapshot of ports without reports: %+v", s)
	}
}

type plainStager struct{}

func (plainStager) Stage(context.Context, state.Target) error { return nil }
func (plainStager) Recover(context.Context) error             { return nil }
