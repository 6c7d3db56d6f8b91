package iocost

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Learning a disk's model without a benchmark: the window runs iocost
// with a model and wide vrate bounds, and the kernel scales the model's
// rate (vrate) until completions meet the QoS latency target — down when
// they miss it, up while the stager is throttled and they meet it with
// margin (blk-iocost's ioc_timer_fn). The model times the vrate the window
// ended at is what the disk gave at that latency under the host's own load:
// the next window starts there. Nothing is written but the staging itself.

// seedIOPS is etcd's own figure for a disk under a loaded member ("500
// sequential IOPS (e.g., a typical local SSD or a high performance
// virtualized block device)", etcd's docs, op-guide/hardware.md).
const seedIOPS = 500

// seedBytesPerIO is the bytes one I/O is worth on cloud block storage's
// baseline volumes (AWS gp3: 3000 IOPS with 125 MiB/s; Azure Premium SSD
// v2 and GCP pd-balanced are of the same shape): 125 MiB / 3000.
const seedBytesPerIO = 125 << 20 / 3000

// Seed is the model of a disk nothing is known about: etcd's recommended
// IOPS at a cloud volume's shape. Wrong for most disks: the kernel scales
// it within staging.iocost_vrate_max (1000 %: a disk 10x the seed's rate
// is found in one window, a faster one over several, each starting from
// the last).
var Seed = Model{User: true,
	RBps: seedIOPS * seedBytesPerIO, RSeqIOPS: seedIOPS, RRandIOPS: seedIOPS,
	WBps: seedIOPS * seedBytesPerIO, WSeqIOPS: seedIOPS, WRandIOPS: seedIOPS}

// MinLearnWindow is the shortest window whose vrate is taken: the kernel
// waits out 4 busy periods before it moves and steps by at most 16 % a
// period, so a shorter window says more about the seed than the disk.
const MinLearnWindow = 30 * time.Second

// Scale is m with every parameter times pct/100 (at least 1: the kernel
// refuses 0).
func (m Model) Scale(pct float64) Model {
	s := func(v uint64) uint64 { return uint64(max(1, math.Round(float64(v)*pct/100))) }
	return Model{User: m.User, RBps: s(m.RBps), RSeqIOPS: s(m.RSeqIOPS), RRandIOPS: s(m.RRandIOPS),
		WBps: s(m.WBps), WSeqIOPS: s(m.WSeqIOPS), WRandIOPS: s(m.WRandIOPS)}
}

// Params is the model as staging.iocost_models takes it after the disk's
// name.
func (m Model) Params() string {
	return fmt.Sprintf("rbps=%d rseqiops=%d rrandiops=%d wbps=%d wseqiops=%d wrandiops=%d",
		m.RBps, m.RSeqIOPS, m.RRandIOPS, m.WBps, m.WSeqIOPS, m.WRandIOPS)
}

// ParseVrates reads the root cgroup's io.stat: each device's vrate
// (" cost.vrate=123.45", percent), printed only where iocost is on.
func ParseVrates(text string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		for _, kv := range f[1:] {
			if v, ok := strings.CutPrefix(kv, "cost.vrate="); ok {
				if x, err := strconv.ParseFloat(v, 64); err == nil && x > 0 {
					out[f[0]] = x
				}
			}
		}
	}
	return out
}

// Learned is one disk's learned model, as the state directory keeps it.
type Learned struct {
	// ID names the disk across reboots and renames (DiskID).
	ID   string `json:"id"`
	Disk string `json:"disk"`
	// Model is the parameters as staging.iocost_models takes them.
	Model string `json:"model"`
	// Vrate is where the last window ended (percent of the model it ran).
	Vrate   float64   `json:"vrate"`
	Windows int       `json:"windows"`
	At      time.Time `json:"at"`
}

// LearnedSet is the state file.
type LearnedSet struct {
	Disks []Learned `json:"disks"`
}

// Find is the entry for id.
func (s LearnedSet) Find(id string) (Learned, bool) {
	for _, l := range s.Disks {
		if l.ID == id {
			return l, true
		}
	}
	return Learned{}, false
}

// Put replaces id's entry or adds it.
func (s *LearnedSet) Put(l Learned) {
	for i := range s.Disks {
		if s.Disks[i].ID == l.ID {
			s.Disks[i] = l
			return
		}
	}
	s.Disks = append(s.Disks, l)
}

// Learn is the model a window ran, scaled by the vrate it ended at, and
// whether there is one: a window shorter than MinLearnWindow, or no vrate
// read, teaches nothing.
func Learn(ran Model, vrate float64, window time.Duration) (Model, bool) {
	if window < MinLearnWindow || vrate <= 0 || math.IsNaN(vrate) || math.IsInf(vrate, 0) {
		return Model{}, false
	}
	return ran.Scale(vrate), true
}

// Source says where a window's model for one disk comes from.
type Source uint8

const (
	Configured Source = iota
	LearnedModel
	Seeded
)

func (s Source) String() string {
	switch s {
	case Configured:
		return "configured (staging.iocost_models)"
	case LearnedModel:
		return "learned in earlier windows"
	case Seeded:
		return "seed (nothing learned on this disk yet)"
	}
	return fmt.Sprintf("source %d", uint8(s))
}

// Short is the source in a word, for status lines and metric labels.
func (s Source) Short() string {
	switch s {
	case Configured:
		return "given"
	case LearnedModel:
		return "learned"
	case Seeded:
		return "seed"
	}
	return "unknown"
}

// Learns is whether the window learns from a disk with this source: an
// operator's model is theirs to change.
func (s Source) Learns() bool { return s == LearnedModel || s == Seeded }

// Plan is the model and source a window uses on disk id: the operator's,
// else the learned one, else the seed.
func Plan(given *Model, set LearnedSet, id string) (Model, Source, error) {
	if given != nil {
		return *given, Configured, nil
	}
	if l, ok := set.Find(id); ok {
		_, m, err := ParseDiskModel("x " + l.Model)
		if err != nil {
			return Seed, Seeded, fmt.Errorf("learned model of %s: %w", l.Disk, err)
		}
		return m, LearnedModel, nil
	}
	return Seed, Seeded, nil
}
