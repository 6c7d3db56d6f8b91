package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/atomicfile"
)

// Keeper keeps the rolling baseline while no staging runs: one reading a
// minute (etcd's histograms change little faster than that at rest, and
// each scrape costs etcd a render of its /metrics), persisted in the
// state directory every few minutes so a restarted agent starts with it.
type Keeper struct {
	Src Source
	// File is where the record is persisted ("" keeps it in memory).
	File string
	// Every spaces readings (default 1m); HalfLife is how fast older
	// observations fade (default 30m); SaveEvery spaces writes (default
	// 5m: the file sits on the disk etcd uses).
	Every, HalfLife, SaveEvery time.Duration
	Clock                      clockwork.Clock
	Log                        *slog.Logger

	mu     sync.Mutex
	rec    Rolling
	last   *Reading
	paused int
	saved  time.Time
}

func (k *Keeper) clock() clockwork.Clock {
	if k.Clock == nil {
		return clockwork.NewRealClock()
	}
	return k.Clock
}

// Load reads the persisted record, if any.
func (k *Keeper) Load() error {
	if k.File == "" {
		return nil
	}
	var r Rolling
	if _, err := atomicfile.ReadJSON(k.File, &r); err != nil {
		return fmt.Errorf("reading the latency baseline: %w", err)
	}
	k.mu.Lock()
	k.rec = r
	k.mu.Unlock()
	return nil
}

// Record returns the current record.
func (k *Keeper) Record() Rolling {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rec
}

// Pause stops learning (a staging window is about to open) and returns
// the function that resumes it. The first reading after resuming only
// starts a new interval: what happened while paused is not normal.
func (k *Keeper) Pause() (resume func()) {
	k.mu.Lock()
	k.paused++
	k.last = nil
	k.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			k.mu.Lock()
			k.paused--
			k.last = nil
			k.mu.Unlock()
		})
	}
}

// Run takes a reading every Every until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	every := k.Every
	if every <= 0 {
		every = time.Minute
	}
	log := k.Log
	if log == nil {
		log = slog.Default()
	}
	if err := k.Load(); err != nil {
		log.Warn("latency baseline: starting afresh", "err", err)
	}
	lastErr := ""
	for {
		if err := k.Step(ctx); err != nil && err.Error() != lastErr && ctx.Err() == nil {
			log.Warn("latency baseline: reading inputs", "err", err)
			lastErr = err.Error()
		} else if err == nil {
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-k.clock().After(every):
		}
	}
}

// Step takes one reading and folds it in, unless paused.
func (k *Keeper) Step(ctx context.Context) error {
	k.mu.Lock()
	paused := k.paused > 0
	k.mu.Unlock()
	if paused {
		return nil
	}
	r, err := k.Src.Read(ctx)
	if r.Hists == nil && r.Pressure == nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.paused > 0 {
		return err
	}
	if k.last != nil {
		s := Delta(*k.last, r)
		deltas := map[string]Histogram{}
		for name, h := range r.Hists {
			deltas[name] = h.Sub(k.last.Hists[name])
		}
		half := k.HalfLife
		if half <= 0 {
			half = 30 * time.Minute
		}
		k.rec = k.rec.Add(r.At, r.At.Sub(k.last.At), deltas, s.Stall, half)
		saveEvery := k.SaveEvery
		if saveEvery <= 0 {
			saveEvery = 5 * time.Minute
		}
		if k.File != "" && r.At.Sub(k.saved) >= saveEvery {
			if serr := k.save(); serr != nil {
				err = errors.Join(err, serr)
			} else {
				k.saved = r.At
			}
		}
	}
	k.last = &r
	return err
}

// save writes the record like every other (atomicfile.WriteJSON, 0600).
func (k *Keeper) save() error {
	return atomicfile.WriteJSON(k.File, k.rec)
}
