package stage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/systemd"
)

// MemoryHigh bounds a unit's page cache, and with it how much dirty data
// ostree's closing syncfs finds. But it counts the unit's own memory too:
// rpm-ostreed loading package metadata for layering needs hundreds of MB,
// and a fixed bound would throttle it on its own allocations. So the
// bound follows the units' own memory: MemoryHigh = what they hold besides
// page cache + the configured allowance.

// cgroupMemory is what a unit's cgroup holds (memory.current, and the
// "file" line of memory.stat: page cache, dirty and under writeback too).
type cgroupMemory struct {
	Current, File uint64
}

const mib = 1 << 20

// memoryHighFor returns the MemoryHigh a unit holding m should have for
// allowance bytes of page cache, and whether it is worth setting given
// the value it has (cur): changes under a quarter of the allowance are
// not, so the property is not rewritten every second.
func memoryHighFor(m cgroupMemory, allowance, cur uint64) (uint64, bool) {
	own := m.Current - min(m.File, m.Current)
	want := (own + allowance + mib - 1) / mib * mib // whole MiB, as systemd shows them
	diff := max(want, cur) - min(want, cur)
	return want, diff >= allowance/4
}

// parseCgroupMemory reads memory.current and memory.stat's file line, in
// place: it runs every second for each unit, and a bufio.Scanner was two
// allocations and 4 KB of garbage each time.
func parseCgroupMemory(current, stat []byte) (cgroupMemory, error) {
	var m cgroupMemory
	var err error
	if m.Current, err = strconv.ParseUint(string(bytes.TrimSpace(current)), 10, 64); err != nil {
		return m, fmt.Errorf("memory.current: %w", err)
	}
	for line := range bytes.Lines(stat) {
		line = bytes.TrimSuffix(line, []byte{'\n'})
		if v, ok := bytes.CutPrefix(line, []byte("file ")); ok {
			if m.File, err = strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64); err != nil {
				return m, fmt.Errorf("memory.stat file: %w", err)
			}
			return m, nil
		}
	}
	return m, fmt.Errorf("memory.stat has no file line")
}

// memoryPacer keeps each unit's MemoryHigh at its own memory plus the
// allowance while the staging window lasts.
type memoryPacer struct {
	sys     Systemd
	sysRoot string // "" = /sys
	units   []string
	// staging is the staging unit among units ("": none, a foreign
	// window), whose bound goes straight into its cgroup.
	staging   string
	allowance uint64
	interval  time.Duration
	set       map[string]uint64 // the MemoryHigh each unit was last given
	dirs      map[string]string // each running unit's cgroup directory
	// files are each running unit's memory.current and memory.stat, kept
	// open: two opens a second per unit were most of the pacer's CPU in
	// the TCG guest.
	files map[string]*[2]guard.KernelFile
	// stalls are what each unit waited on (stall.go), logged at the end.
	stalls map[string]*stallMeter
	// pread, when set, is the files' (tests inject the kernel's failures).
	pread func(fd int, p []byte, off int64) (int, error)
	clock clockwork.Clock // nil: the real one
}

// memoryPacer returns the pacer for the staging unit and the daemon, or nil
// when the window allows any page cache (allowance 0, the window's
// choice: Stager.choosePacing). The daemon's MemoryHigh is recorded in the
// journal first, so undo (or Recover) sets it back.
func (s *Stager) memoryPacer(ctx context.Context, j *journal, stagingUnit string, allowance uint64) *memoryPacer {
	if allowance == 0 {
		return nil
	}
	var units []string // "": a foreign window, the daemon alone
	if stagingUnit != "" {
		units = append(units, stagingUnit)
	}
	if d := s.o.DaemonUnit; d != "" {
		if err := s.setRuntime(ctx, j, d, systemd.Policy{MemoryHigh: allowance}.CgroupProperties()...); err != nil {
			s.log.Warn("the daemon keeps a fixed memory bound while staging", "systemd_unit", d, "err", err)
		} else {
			units = append(units, d)
		}
	}
	if len(units) == 0 {
		return nil
	}
	p := &memoryPacer{sys: s.d.Systemd, sysRoot: s.o.SysRoot, units: units, staging: stagingUnit,
		allowance: allowance, interval: time.Second, set: map[string]uint64{}}
	for _, u := range units {
		p.set[u] = allowance // what the policy gave them
	}
	return p
}

// run adjusts until ctx is done. Errors are logged once each, not
// returned: the fixed bound stays, and staging goes on.
func (p *memoryPacer) run(ctx context.Context, log *slog.Logger) {
	logged := map[string]bool{}
	clk := p.clock
	if clk == nil {
		clk = clockwork.NewRealClock()
	}
	var tick clockwork.Timer
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	defer p.close()
	defer p.logStalls(log)
	for {
		for _, u := range p.units {
			was := p.set[u]
			err := p.step(ctx, u)
			if err != nil && !logged[err.Error()] && ctx.Err() == nil {
				logged[err.Error()] = true
				log.Warn("staging memory bound not adjusted", "systemd_unit", u, "err", err)
			}
			if err := p.stall(u, clk.Now()); err != nil && ctx.Err() == nil {
				log.Warn("what the staging unit waits on is not measured", "systemd_unit", u, "err", err)
			}
			if p.set[u] != was {
				log.Info("staging memory bound follows the unit's own memory", "systemd_unit", u,
					"memory_high_mib", p.set[u]/mib, "page_cache_allowance_mib", p.allowance/mib)
			}
		}
		// On the guard's grid: every fourth of its ticks wakes the process
		// for both.
		now := clk.Now()
		wait := guard.NextTick(now, p.interval).Sub(now)
		if tick == nil {
			tick = clk.NewTimer(wait)
		} else {
			tick.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.Chan():
		}
	}
}

func (p *memoryPacer) step(ctx context.Context, unit string) error {
	dir, err := p.cgroup(ctx, unit)
	if err != nil || dir == "" {
		return err // "": rpm-ostreed between transactions: its next start gets the fixed bound
	}
	f := p.files[unit]
	if f == nil {
		f = &[2]guard.KernelFile{{Path: filepath.Join(dir, "memory.current"), Pread: p.pread},
			{Path: filepath.Join(dir, "memory.stat"), Pread: p.pread}}
		if p.files == nil {
			p.files = map[string]*[2]guard.KernelFile{}
		}
		p.files[unit] = f
	}
	// The cgroup removed, the kept files fail, and their reopen finds
	// nothing: the unit stopped, look it up again next time.
	cur, err := f[0].Read()
	if errors.Is(err, fs.ErrNotExist) {
		p.forget(unit)
		return nil
	}
	if err != nil {
		return err
	}
	stat, err := f[1].Read()
	if err != nil {
		return err
	}
	m, err := parseCgroupMemory(cur, stat)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	want, ok := memoryHighFor(m, p.allowance, p.set[unit])
	if !ok {
		return nil
	}
	if unit == p.staging {
		// The staging unit: straight into its cgroup. systemd keeps runtime
		// properties in control files that outlive a transient unit and
		// would apply to the next staging unit of that name.
		if err := os.WriteFile(filepath.Join(dir, "memory.high"), []byte(strconv.FormatUint(want, 10)), 0); err != nil {
			return fmt.Errorf("setting memory.high=%d: %w", want, err)
		}
	} else if err := p.sys.SetRuntime(ctx, unit, systemd.Policy{MemoryHigh: want}.CgroupProperties()...); err != nil {
		return fmt.Errorf("setting MemoryHigh=%d: %w", want, err)
	}
	p.set[unit] = want
	return nil
}

// stall reads what unit waited on while it runs (its cgroup known); an
// error once, after which the unit is not read again.
func (p *memoryPacer) stall(unit string, now time.Time) error {
	dir, ok := p.dirs[unit]
	if !ok {
		return nil
	}
	if p.stalls == nil {
		p.stalls = map[string]*stallMeter{}
	}
	m := p.stalls[unit]
	if m == nil {
		m = &stallMeter{}
		p.stalls[unit] = m
	}
	if m.off {
		return nil
	}
	if err := m.read(dir, now, p.pread); err != nil {
		if _, serr := os.Stat(dir); errors.Is(serr, fs.ErrNotExist) {
			m.stopped() // the unit stopped since its memory was read
			return nil
		}
		m.off = true
		m.close()
		return err
	}
	return nil
}

// logStalls says, per unit, what it waited on over the window.
func (p *memoryPacer) logStalls(log *slog.Logger) {
	for _, u := range p.units {
		if m := p.stalls[u]; m != nil && m.total.Span > 0 {
			log.Info("what the staging unit waited on over the window", append([]any{"systemd_unit", u}, m.total.LogAttrs()...)...)
		}
	}
}

// forget drops what the pacer knows of a unit that stopped.
func (p *memoryPacer) forget(unit string) {
	delete(p.dirs, unit)
	if m := p.stalls[unit]; m != nil {
		m.stopped()
	}
	if f := p.files[unit]; f != nil {
		f[0].Close()
		f[1].Close()
		delete(p.files, unit)
	}
}

func (p *memoryPacer) close() {
	for u := range p.files {
		p.forget(u)
	}
	for _, m := range p.stalls {
		m.close()
	}
}

// cgroup is unit's cgroup directory, "" while it does not run. It asks
// systemd only until it knows (then the cgroup files say whether the unit
// still runs): a D-Bus read a second per unit is CPU the TCG guest's etcd
// misses.
func (p *memoryPacer) cgroup(ctx context.Context, unit string) (string, error) {
	if d, ok := p.dirs[unit]; ok {
		return d, nil
	}
	st, err := p.sys.Brief(ctx, unit)
	if err != nil {
		return "", err
	}
	if st.ActiveState != "active" && st.ActiveState != "activating" {
		return "", nil
	}
	cg, err := p.sys.ControlGroup(ctx, unit)
	if err != nil || cg == "" {
		return "", err
	}
	if p.dirs == nil {
		p.dirs = map[string]string{}
	}
	p.dirs[unit] = cgroupDir(p.sysRoot, cg)
	return p.dirs[unit], nil
}

// cgroupDir is a unit's cgroup directory (ControlGroup as systemd reports
// it) under sysRoot ("" = /sys).
func cgroupDir(sysRoot, controlGroup string) string {
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	return filepath.Join(sysRoot, "fs/cgroup", controlGroup)
}
