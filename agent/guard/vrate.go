package guard

import (
	"sort"
	"time"
)

// VrateSpan follows iocost's vrate on each disk over a window (the root
// io.stat's cost.vrate at every reading): where it went and for how long,
// not only where it ended. A window that ends at 340 % may have spent
// minutes flat at 270 % (measured on ext4's fast disk with a sampler in
// the guest); the end alone cannot tell a vrate that climbed from one
// that sat, and the QoS percentile's effect is in the difference.
type VrateSpan struct {
	disks map[string]*vrateDisk
}

type vrateDisk struct {
	min, max, last float64
	weighted       float64 // sum of vrate x seconds held
	seconds        float64
	at             time.Time
	n              int
}

// VrateSummary is one disk's vrate over the window (percent of the model;
// Mean weighs each reading by how long it held).
type VrateSummary struct {
	Disk                 string
	Min, Mean, Max, Last float64
	Readings             int
}

// Add takes a reading's books (disks without a vrate are skipped).
func (v *VrateSpan) Add(at time.Time, books map[string]CostStat) {
	for disk, st := range books {
		if st.Vrate <= 0 {
			continue
		}
		if v.disks == nil {
			v.disks = map[string]*vrateDisk{}
		}
		d, ok := v.disks[disk]
		if !ok {
			v.disks[disk] = &vrateDisk{min: st.Vrate, max: st.Vrate, last: st.Vrate, at: at, n: 1}
			continue
		}
		if s := at.Sub(d.at).Seconds(); s > 0 {
			d.weighted += d.last * s
			d.seconds += s
		}
		d.min, d.max = min(d.min, st.Vrate), max(d.max, st.Vrate)
		d.last, d.at = st.Vrate, at
		d.n++
	}
}

// Summaries are the disks' summaries by name.
func (v *VrateSpan) Summaries() []VrateSummary {
	var out []VrateSummary
	for disk, d := range v.disks {
		mean := d.last
		if d.seconds > 0 {
			mean = d.weighted / d.seconds
		}
		out = append(out, VrateSummary{Disk: disk, Min: d.min, Mean: mean, Max: d.max, Last: d.last, Readings: d.n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Disk < out[j].Disk })
	return out
}
