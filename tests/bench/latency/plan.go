package latency

import (
	"slices"
	"strings"
	"time"

	"github.com/update-agent/update-agent/tests/bench/report"
)

// The plan: which disks, which scenarios on each, in what order.

// Plan is what one run measures, in order, per disk.
type Plan struct {
	UpdateSize string // mkupdate -size
	UpdateFile int    // mkupdate -files
	AloneFor   time.Duration
	// Disks are measured in this order; each is one of Disks on one
	// filesystem (Disk.FS), named "<fs>-<disk>".
	Disks     []Disk
	Scenarios map[string][]Scenario // by Disk.Name
}

// On is d formatted with fs: what XFS holds can hurt on ext4 (measured:
// a 5M write cap is 1.4x alone on XFS and worse than no cap on ext4).
func On(fs string, d Disk) Disk {
	d.FS, d.Name = fs, fs+"-"+d.Name
	return d
}

// Core are the scenarios every disk runs: alone, naive, the 2020 recipe,
// the agent's defaults and the agent without its guard.
func Core() []Scenario {
	return []Scenario{
		{ID: report.ScenarioAlone, Stager: NoStaging},
		{ID: report.ScenarioNaive, Stager: Naive},
		{ID: "c-openshift2020", Stager: Recipe2020},
		{ID: report.ScenarioAgent, Stager: Agent},
		{ID: "e-agent-noguard", Stager: Agent, AgentConfig: "[guard]\nenabled = false\n"},
	}
}

// MakePlan returns the plan of the issue (a-e on both disks on XFS, what
// Fedora CoreOS and RHCOS use for / and /var/lib/etcd, and a, b, d on both
// disks on ext4; 600 MiB; f, companion mode, on the small XFS disk), or the quick one (300 MiB, the small XFS disk,
// a, b, d and e) for iteration. Sweep adds every knob, probe and load
// variant to the small XFS disk: BENCH_SCENARIOS picks from it.
func MakePlan(quick bool) Plan {
	small, big := Disks[1], Disks[0]
	if quick {
		sc := Core()
		d := On("xfs", small)
		return Plan{UpdateSize: "300MiB", UpdateFile: 3000, AloneFor: 30 * time.Second, Disks: []Disk{d},
			Scenarios: map[string][]Scenario{d.Name: {sc[0], sc[1], sc[3], sc[4]}}}
	}
	// The small disk first: it is where the stalls are.
	p := Plan{UpdateSize: "600MiB", UpdateFile: FilesFor("600MiB"), AloneFor: 60 * time.Second, Scenarios: map[string][]Scenario{}}
	for _, d := range []Disk{On("xfs", small), On("xfs", big)} {
		p.Disks = append(p.Disks, d)
		p.Scenarios[d.Name] = Core()
	}
	for _, d := range []Disk{On("ext4", small), On("ext4", big)} {
		p.Disks = append(p.Disks, d)
		c := Core()
		p.Scenarios[d.Name] = []Scenario{c[0], c[1], c[3], AgentLearned}
	}
	// The scale model on both filesystems: what the disk alone does.
	for _, d := range []Disk{On("xfs", ScaleModel), On("ext4", ScaleModel)} {
		p.Disks = append(p.Disks, d)
		c := Core()
		p.Scenarios[d.Name] = []Scenario{c[0], c[1], c[3]}
		if d.FS == "ext4" {
			p.Scenarios[d.Name] = append(p.Scenarios[d.Name], AgentLearned)
		}
	}
	// On every disk: iocost with the auto model beside the rate loop (d-agent), and
	// the CPU-only probe, the in-guest limit line of each table.
	for _, d := range p.Disks {
		p.Scenarios[d.Name] = append(p.Scenarios[d.Name], IOCostLearn, Probes[0])
	}
	// Companion mode beside b-naive and d-agent on the small XFS disk, where
	// the stalls are.
	small0 := p.Disks[0].Name
	p.Scenarios[small0] = append(p.Scenarios[small0], CompanionScenario, CompanionMatureScenario)
	return p
}

// Sweep is the full plan plus, on the small XFS disk, every knob, the
// probes, the unlimited job and etcd on its own filesystem; on the small
// ext4 disk, the guard off and the fixed write caps.
func Sweep() Plan {
	p := MakePlan(false)
	name := p.Disks[0].Name
	small := p.Scenarios[name]
	for _, k := range Knobs {
		small = append(small, Scenario{ID: k.ID, Stager: Agent, AgentConfig: k.Config})
	}
	small = append(small, AgentRuns...)
	for _, pr := range Probes {
		if !slices.ContainsFunc(small, func(s Scenario) bool { return s.Key() == pr.Key() }) {
			small = append(small, pr)
		}
	}
	for _, s := range []Scenario{
		{ID: report.ScenarioAlone, Stager: NoStaging},
		{ID: report.ScenarioNaive, Stager: Naive},
		{ID: report.ScenarioAgent, Stager: Agent},
	} {
		u := s
		u.FioUnlimited = true
		small = append(small, u)
		sp := s
		sp.SplitFS = true
		small = append(small, sp)
	}
	small = append(small, IOCostScenarios(p.Disks[0])...)
	small = append(small, BFQAtBoot)
	p.Scenarios[name] = small
	// iocost's variants on every other disk too: both filesystems, both
	// standard disks and the scale model (the "both disks").
	for _, d := range p.Disks[1:] {
		p.Scenarios[d.Name] = append(p.Scenarios[d.Name], IOCostScenarios(d)...)
		p.Scenarios[d.Name] = append(p.Scenarios[d.Name], BFQAtBoot)
	}
	// On ext4 the write cap met the journal's ordered mode (etcd worse than
	// naive with the capped loop, full-ostree-ext4-600MiB-1; "auto" sets no
	// cap there since): the guard off, the fixed caps (k-bwmax-4M is the
	// loop as it was there, at its floor), and what bounds the dirty data a
	// journal commit has to write first, on both ext4 disks.
	for _, d := range []Disk{Disks[1], Disks[0]} {
		ext4 := On("ext4", d).Name
		p.Scenarios[ext4] = append(p.Scenarios[ext4], Core()[4])
		for _, k := range Knobs {
			// Per-object fsync and a smaller page cache bound the stager's
			// dirty data that etcd's fsync finds in an ordered-mode journal
			// commit. The stager's CPU weight at the other units' (not
			// "idle"): on the fast disk iocost's windows staged at 4.7-7x
			// plain with rpm-ostreed waiting on the CPU 47 % of the time
			// and vrate flat (brake-ext4-fast-200MiB-1); on the small disk
			// it staged no faster and cost etcd (cpuweight-ext4-200MiB-1).
			// And the page cache bound at 64M (the defaults' "auto" is 8M
			// under iocost on ext4): is it what holds staging at 4.6x
			// plain on the fast disk, with the disk mostly idle? And at
			// 16M: the dirty limits, shares of the bound, throttle the
			// defaults' writer most of its window (prof-ext4-200MiB-1).
			if strings.HasPrefix(k.ID, "k-bwmax-") || k.ID == "k-objfsync" || slices.Contains([]string{"k-memoryhigh-8M", "k-memoryhigh-16M", "k-memoryhigh-64M", "k-cpuweight-100"}, k.ID) {
				p.Scenarios[ext4] = append(p.Scenarios[ext4], Scenario{ID: k.ID, Stager: Agent, AgentConfig: k.Config})
			}
		}
	}
	return p
}

// Only keeps the scenarios whose Key is listed (BENCH_SCENARIOS), and the
// disks that still have one; for iterating on a single scenario.
func (p Plan) Only(ids []string) Plan {
	keep := map[string]bool{}
	for _, id := range ids {
		keep[id] = true
	}
	out := p
	out.Disks, out.Scenarios = nil, map[string][]Scenario{}
	for _, d := range p.Disks {
		for _, s := range p.Scenarios[d.Name] {
			if keep[s.Key()] {
				out.Scenarios[d.Name] = append(out.Scenarios[d.Name], s)
			}
		}
		if len(out.Scenarios[d.Name]) > 0 {
			out.Disks = append(out.Disks, d)
		}
	}
	return out
}
