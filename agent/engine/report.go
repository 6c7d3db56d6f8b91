package engine

import "time"

// What ports know beyond their results, for `update-agent status`: the
// engine adds it to its Snapshot, so status reads one source.

// StagingReport is how the last staging went.
type StagingReport struct {
	At          time.Time `json:"at"`
	Seconds     float64   `json:"seconds"`
	OK          bool      `json:"ok"`
	Error       string    `json:"error,omitempty"`
	Disks       []string  `json:"disks,omitempty"`
	Guarded     bool      `json:"guarded"`
	Freezes     int       `json:"freezes"`
	ForcedThaws int       `json:"forced_thaws"`
	Frozen      float64   `json:"frozen_seconds"`
	Baseline    string    `json:"baseline,omitempty"`
	Setup       float64   `json:"setup_seconds"`
	WriteRate   uint64    `json:"write_rate,omitempty"`
	RateCuts    int       `json:"write_rate_cuts,omitempty"`
	// Pacing is how the window paced staging ("iocost (vda learned)",
	// "write rate loop", ...).
	Pacing string `json:"pacing,omitempty"`
}

// QueuePosition is where this node stood when it last waited for a slot
// (field names as agent/lock's Position).
type QueuePosition struct {
	Holder bool
	Index  int
	Ahead  int
	Queued int
	Slots  int
}

// StagingReporter is a Stager that tells how its last staging went.
type StagingReporter interface {
	LastStaging() *StagingReport
}

// PositionReporter is a Lock that tells where the node last stood in line.
type PositionReporter interface {
	Position() *QueuePosition
}
