package guard

import (
	"sync/atomic"
	"time"
)

// Live is the pacing in force while a staging window is open, for
// `status` and the metrics: what the brake does now and etcd's WAL fsync
// p99 against the baseline it is judged by.
type Live struct {
	// Pacing is the window's pacing line (stage's pacingSummary).
	Pacing string    `json:"pacing"`
	Since  time.Time `json:"since"`
	// Guarded: a guard runs; the fields below are its last step's.
	Guarded bool `json:"guarded"`
	// At is the guard's last step (zero: none yet).
	At time.Time `json:"at,omitzero"`
	// Braking: the brake holds the units frozen now.
	Braking bool `json:"braking"`
	// Rate is the write rate loop's rate (bytes/s); 0: no loop.
	Rate uint64 `json:"rate_bytes_per_second,omitempty"`
	// WALP99 is etcd's WAL fsync p99 over the guard's last sample and
	// WALBaseline the baseline p99 it is judged against (0: unknown).
	WALP99      time.Duration `json:"wal_fsync_p99,omitempty"`
	WALBaseline time.Duration `json:"wal_fsync_baseline_p99,omitempty"`
}

// LiveReader is the read-only side of a Board: what `status` and the
// metrics see.
type LiveReader interface {
	// Live is the open window's pacing; ok is false with no window open.
	Live() (l Live, ok bool)
}

// Board holds the open window's Live. Stage opens and closes it around a
// window, the guard's loop publishes each step; readers never block it.
// The zero value is ready; a nil *Board takes writes and reads nothing.
type Board struct{ p atomic.Pointer[Live] }

// Live implements LiveReader.
func (b *Board) Live() (Live, bool) {
	if b == nil {
		return Live{}, false
	}
	l := b.p.Load()
	if l == nil {
		return Live{}, false
	}
	return *l, true
}

// Open says a window is open with this pacing line.
func (b *Board) Open(pacing string, now time.Time) {
	if b != nil {
		b.p.Store(&Live{Pacing: pacing, Since: now})
	}
}

// Close says no window is open.
func (b *Board) Close() {
	if b != nil {
		b.p.Store(nil)
	}
}

// step publishes the guard's state over its updates, if a window is open
// (a guard outliving its window publishes nothing).
func (b *Board) step(update func(*Live)) {
	if b == nil {
		return
	}
	for {
		old := b.p.Load()
		if old == nil {
			return
		}
		l := *old
		update(&l)
		if b.p.CompareAndSwap(old, &l) {
			return
		}
	}
}

// liveStep is what one guard step says: s is the short sample, long the
// rate window's (preferred for the p99 when it has WAL observations: one
// second of fsyncs says little).
func liveStep(l *Live, at time.Time, frozen bool, rate uint64, base Baseline, s Sample, long *Sample) {
	l.Guarded, l.At, l.Braking, l.Rate = true, at, frozen, rate
	l.WALBaseline = base[SignalWALFsync].P99
	st, ok := s.Latency[SignalWALFsync]
	if long != nil {
		if lst, lok := long.Latency[SignalWALFsync]; lok && lst.N > 0 {
			st, ok = lst, true
		}
	}
	if ok && st.N > 0 {
		l.WALP99 = st.P99
	}
}
