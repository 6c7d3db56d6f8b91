package kstacks

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
)

// Counters are cumulative CPU and pressure figures, in microseconds: a
// cgroup's (cpu.stat's usage_usec, the "some" totals of its cpu.pressure
// and io.pressure) or the whole guest's (/proc/stat's busy time, the
// "some" totals of /proc/pressure/cpu and io). A stack sampled in D says
// where a thread waits for I/O; a thread waiting for a CPU is in R, and
// only these say how long: whether etcd's excess is the disk or the CPU.
type Counters struct {
	UsedUS, CPUSomeUS, IOSomeUS int64
	CPUs                        int // the guest's; 0 for a cgroup
	// IOCost is a cgroup's iocost figures, nil where its io.stat has
	// none (no iocost on its disks, or blkcg_debug_stats off).
	IOCost *IOCostCounters
}

// IOCostCounters are the cumulative iocost figures of a cgroup's io.stat
// (blk-iocost's ioc_pd_stat, shown with blk_cgroup's blkcg_debug_stats
// on), in microseconds, summed over its disks: how long it had bios
// waiting for budget (cost.wait), was in debt (cost.indebt), and had its
// tasks delayed on return to user space for that debt (cost.indelay). Its
// CPU and I/O pressure say it waited; these say whether iocost held it.
type IOCostCounters struct {
	WaitUS, DebtUS, DelayUS int64
}

// ParseIOCostStat sums the cost.wait, cost.indebt and cost.indelay of a
// cgroup's io.stat over its disks; nil when no line has cost.wait.
func ParseIOCostStat(b []byte) (*IOCostCounters, error) {
	var c IOCostCounters
	found := false
	for line := range bytes.Lines(b) {
		f := strings.Fields(string(line)) // "MAJ:MIN key=value ..."
		if len(f) < 2 {
			continue
		}
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			var into *int64
			switch {
			case !ok:
				continue
			case k == "cost.wait":
				into, found = &c.WaitUS, true
			case k == "cost.indebt":
				into = &c.DebtUS
			case k == "cost.indelay":
				into = &c.DelayUS
			default:
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("io.stat %q: %s", line, kv)
			}
			*into += n
		}
	}
	if !found {
		return nil, nil
	}
	return &c, nil
}

// pressureSome is the "some" total of a pressure file in microseconds,
// read by the agent's own parser (guard.ParsePressure).
func pressureSome(b []byte) (int64, error) {
	p, err := guard.ParsePressure(string(b))
	return p.SomeTotal.Microseconds(), err
}

// ParseCPUStatUsage is a cgroup cpu.stat's usage_usec in microseconds,
// read by the agent's own parser (guard.ParseCPUStatUsage).
func ParseCPUStatUsage(b []byte) (int64, error) {
	d, err := guard.ParseCPUStatUsage(b)
	return d.Microseconds(), err
}

// userHZ is the unit of /proc/stat's times (USER_HZ, 100 on Linux).
const userHZ = 100

// ParseProcStat is the guest's busy CPU time in microseconds (user, nice,
// system, irq, softirq and steal of the "cpu" line: all but idle and
// iowait) and its number of CPUs (the "cpuN" lines).
func ParseProcStat(b []byte) (busyUS int64, cpus int, err error) {
	found := false
	for line := range bytes.Lines(b) {
		f := strings.Fields(string(line))
		switch {
		case len(f) > 0 && f[0] == "cpu":
			if len(f) < 9 {
				return 0, 0, fmt.Errorf("/proc/stat cpu line %q: too short", line)
			}
			for i, v := range f[1:9] {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 0 {
					return 0, 0, fmt.Errorf("/proc/stat cpu line %q: field %d", line, i+1)
				}
				if i != 3 && i != 4 { // idle, iowait
					busyUS += n * (1e6 / userHZ)
				}
			}
			found = true
		case len(f) > 0 && strings.HasPrefix(f[0], "cpu"):
			cpus++
		}
	}
	if !found || cpus == 0 {
		return 0, 0, fmt.Errorf("/proc/stat: no cpu lines")
	}
	return busyUS, cpus, nil
}

// CPUFigures are what Counters read at two times say, per second between
// them.
type CPUFigures struct {
	Seconds float64 `json:"seconds"`
	CPUs    int     `json:"cpus,omitempty"`
	// Used is CPUs' worth of time used (1 = one CPU all the time).
	Used float64 `json:"cpus_used"`
	// CPUWaitMS and IOWaitMS are milliseconds per second during which at
	// least one task waited for a CPU, for I/O ("some" pressure).
	CPUWaitMS float64 `json:"cpu_wait_ms_per_s"`
	IOWaitMS  float64 `json:"io_wait_ms_per_s"`
	// IOCost is per second too, over the readings that had it (its
	// own Seconds).
	IOCost *IOCostFigures `json:"iocost,omitempty"`
}

// IOCostFigures are IOCostCounters per second between two readings, in
// milliseconds per second.
type IOCostFigures struct {
	Seconds float64 `json:"seconds"` // between the readings that had them
	WaitMS  float64 `json:"wait_ms_per_s"`
	DebtMS  float64 `json:"indebt_ms_per_s"`
	DelayMS float64 `json:"indelay_ms_per_s"`
}

// Render is "bios waited for budget 420 ms/s, in debt 3 ms/s, tasks
// delayed 0 ms/s (over 200 s)".
func (f *IOCostFigures) Render() string {
	return fmt.Sprintf("bios waited for budget %.0f ms/s, in debt %.0f ms/s, tasks delayed %.0f ms/s (over %.0f s)", f.WaitMS, f.DebtMS, f.DelayMS, f.Seconds)
}

type counterSpan struct {
	first, last       Counters
	firstAt, lastAt   time.Time
	haveFirst, moreAt bool
	// iocost's figures span only the readings that had them: the agent
	// turns iocost on for its window, after the sampler started.
	iocFirst, iocLast     IOCostCounters
	iocFirstAt, iocLastAt time.Time
	haveIOC, moreIOC      bool
}

func (c *counterSpan) add(at time.Time, v Counters) {
	if v.IOCost != nil && !c.haveIOC {
		c.iocFirst, c.iocFirstAt, c.haveIOC = *v.IOCost, at, true
	} else if v.IOCost != nil {
		c.iocLast, c.iocLastAt, c.moreIOC = *v.IOCost, at, true
	}
	if !c.haveFirst {
		c.first, c.firstAt, c.haveFirst = v, at, true
		return
	}
	c.last, c.lastAt, c.moreAt = v, at, true
}

// figures is nil until two readings were taken.
func (c *counterSpan) figures() *CPUFigures {
	if !c.moreAt {
		return nil
	}
	s := c.lastAt.Sub(c.firstAt).Seconds()
	if s <= 0 {
		return nil
	}
	per := func(a, b int64) float64 { return float64(b-a) / s }
	f := &CPUFigures{Seconds: s, CPUs: c.last.CPUs,
		Used:      per(c.first.UsedUS, c.last.UsedUS) / 1e6,
		CPUWaitMS: per(c.first.CPUSomeUS, c.last.CPUSomeUS) / 1e3,
		IOWaitMS:  per(c.first.IOSomeUS, c.last.IOSomeUS) / 1e3}
	if is := c.iocLastAt.Sub(c.iocFirstAt).Seconds(); c.moreIOC && is > 0 {
		a, b := c.iocFirst, c.iocLast
		per := func(x, y int64) float64 { return float64(y-x) / is / 1e3 }
		f.IOCost = &IOCostFigures{Seconds: is, WaitMS: per(a.WaitUS, b.WaitUS), DebtMS: per(a.DebtUS, b.DebtUS), DelayMS: per(a.DelayUS, b.DelayUS)}
	}
	return f
}

// Render is one line of f: "used 0.52 CPUs; waited for a CPU 120 ms/s,
// for I/O 40 ms/s (some)".
func (f *CPUFigures) Render() string {
	of := ""
	if f.CPUs > 0 {
		of = fmt.Sprintf(" of %d", f.CPUs)
	}
	return fmt.Sprintf("used %.2f CPUs%s; some task waited for a CPU %.0f ms/s, for I/O %.0f ms/s (over %.0f s)",
		f.Used, of, f.CPUWaitMS, f.IOWaitMS, f.Seconds)
}
