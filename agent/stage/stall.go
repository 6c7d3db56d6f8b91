package stage

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
)

// What a staging unit waited on over the window: its CPU use and the
// kernel's pressure totals ("some": a task of the cgroup waited) for a CPU
// and for I/O, which counts a writer paused by dirty throttling
// (balance_dirty_pages) as well as one waiting on the disk or on iocost.
// Under iocost on ext4's small disk rpm-ostreed's writer sat in dirty
// throttling 72-80 % of its samples in D while the disk had no write in
// flight 85-88 % of the time, and its threads waited for a CPU
// (prof-ext4-200MiB-1): the journal says which wait held staging. The
// memory pacer reads them on its round, from the cgroups it follows.

// stallFigures are a unit's totals over the spans it was read across.
type stallFigures struct {
	Span, CPUUsed, CPUWait, IOWait time.Duration
}

// LogAttrs are the figures per second of the span: CPUs used, and the
// share of the time some task waited for a CPU, for I/O.
func (f stallFigures) LogAttrs() []any {
	s := f.Span.Seconds()
	if s <= 0 {
		return []any{"seconds", 0}
	}
	return []any{"seconds", round3(s), "cpus_used", round3(f.CPUUsed.Seconds() / s),
		"cpu_wait_share", round3(f.CPUWait.Seconds() / s), "io_wait_share", round3(f.IOWait.Seconds() / s)}
}

type stallReading struct {
	at                    time.Time
	used, cpuWait, ioWait time.Duration
}

// stallMeter sums a unit's readings: each step adds what changed since
// the one before, so a unit that stops and starts again (rpm-ostreed
// between transactions, its counters new with its cgroup) counts each of
// its runs, not the gap.
type stallMeter struct {
	total stallFigures
	prev  *stallReading
	files *[3]guard.KernelFile // cpu.stat, cpu.pressure, io.pressure
	// off: a file did not read (no PSI in this kernel): not tried again.
	off bool
}

func (m *stallMeter) add(r stallReading) {
	if p := m.prev; p != nil && r.at.After(p.at) && r.used >= p.used && r.cpuWait >= p.cpuWait && r.ioWait >= p.ioWait {
		m.total.Span += r.at.Sub(p.at)
		m.total.CPUUsed += r.used - p.used
		m.total.CPUWait += r.cpuWait - p.cpuWait
		m.total.IOWait += r.ioWait - p.ioWait
	}
	m.prev = &r
}

// read takes a reading from the unit's cgroup dir, its files kept open
// as the pacer's own are.
func (m *stallMeter) read(dir string, at time.Time, pread func(int, []byte, int64) (int, error)) error {
	if m.files == nil {
		m.files = &[3]guard.KernelFile{{Path: filepath.Join(dir, "cpu.stat"), Pread: pread},
			{Path: filepath.Join(dir, "cpu.pressure"), Pread: pread}, {Path: filepath.Join(dir, "io.pressure"), Pread: pread}}
	}
	r := stallReading{at: at}
	b, err := m.files[0].Read()
	if err == nil {
		r.used, err = guard.ParseCPUStatUsage(b)
	}
	for i, into := range []*time.Duration{&r.cpuWait, &r.ioWait} {
		if err != nil {
			break
		}
		if b, err = m.files[i+1].Read(); err == nil {
			var p guard.Pressure
			p, err = guard.ParsePressure(string(b))
			*into = p.SomeTotal
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	m.add(r)
	return nil
}

// stopped: the unit's cgroup is gone; its next one counts from a new
// first reading.
func (m *stallMeter) stopped() {
	m.prev = nil
	m.close()
}

func (m *stallMeter) close() {
	if m.files != nil {
		for i := range m.files {
			m.files[i].Close()
		}
		m.files = nil
	}
}
