package doctor

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/update-agent/update-agent/agent/iocost"
	"github.com/update-agent/update-agent/agent/iosched"
)

// ModelSource is where the cost model iocost uses on a disk in the
// staging window comes from.
type ModelSource int

const (
	// ModelOperator: the disk's line in staging.iocost_models.
	ModelOperator ModelSource = iota + 1
	// ModelLearned: none given; the stager learned one in earlier
	// windows (agent/iocost/learn.go).
	ModelLearned
	// ModelSeed: none given or learned yet: the window starts from the
	// seed and learns the disk.
	ModelSeed
)

func (m ModelSource) String() string {
	switch m {
	case ModelOperator:
		return "the operator's model (staging.iocost_models)"
	case ModelLearned:
		return "the model learned on this disk"
	case ModelSeed:
		return "the seed model, learning this disk in the window"
	}
	return fmt.Sprintf("model source %d", int(m))
}

// modelSource is where disk's model would come from, in the order the
// stager takes them (iocost.Plan), and the learned model's line to pin.
func (d Doctor) modelSource(disk string) (ModelSource, string) {
	if _, ok := d.In.IOCostModels[disk]; ok {
		return ModelOperator, ""
	}
	if d.IO != nil && d.In.StateDir != "" {
		if l, ok, err := d.IO.Learned(disk, d.In.StateDir); err == nil && ok {
			return ModelLearned, fmt.Sprintf("%q after %d windows", disk+" "+l.Model, l.Windows)
		}
	}
	return ModelSeed, ""
}

// rateMode is the window's write cap on the disks iocost is not on: the
// stager's own decision (iosched.WriteCapMode).
type rateMode = iosched.WriteCap

const (
	rateNone  = iosched.CapNone
	rateFixed = iosched.CapFixed
	rateStart = iosched.CapStart
	rateLoop  = iosched.CapLoop
)

// window is what the stager would find for the staging window.
type window struct {
	disks   []string
	cost    []string // the disks iocost goes on
	costErr error    // the kernel has no iocost (nil: it has, or not asked)
	ordered []string // staging paths whose journal orders data, described
	fsErr   error    // the file systems could not be read
	rate    rateMode
	// memory is the page cache bound (0: none) and why
	// (iocost.MemoryAllowance).
	memory    uint64
	memoryWhy string
}

// stagingWindow reads the window as agent/stage decides it
// (Stager.open): iocost on the disks staging.iocost picks for the journal
// (iocost.Disks) where the kernel has it, one write-cap mode for the
// others, and the page cache bound (iocost.MemoryAllowance).
func (d Doctor) stagingWindow(disks []string) window {
	w := window{disks: disks}
	w.ordered, w.fsErr = d.orderedFilesystems(disks)
	w.cost = iocost.Disks(d.In.IOCost, disks, d.In.IOCostModels, len(w.ordered) > 0)
	if len(w.cost) > 0 {
		err := errors.New("not read")
		if d.IO != nil {
			err = d.IO.IOCost()
		}
		if err != nil {
			w.cost, w.costErr = nil, err
		}
	}
	w.rate = iosched.WriteCapMode(d.In.WriteRateAuto, d.In.WriteBandwidthMax, d.In.GuardEnabled, len(w.ordered) > 0, len(w.cost) > 0)
	w.memory, w.memoryWhy = iocost.MemoryAllowance(d.In.MemoryHigh, d.In.MemoryHighAuto, len(w.cost) > 0, len(w.ordered) > 0)
	return w
}

// pageCache is the window's page cache bound on the stager and
// rpm-ostreed, and why, as the stager's "pacing chosen" line says it.
func (d Doctor) pageCache(w window) Result {
	if w.memory == 0 {
		return Result{Check: "page cache", OK: true, Detail: "no bound: " + w.memoryWhy}
	}
	detail := "bound " + iocost.FormatMemory(w.memory) + ": " + w.memoryWhy
	if d.In.MemoryHighAuto {
		detail += ` (staging.memory_high = "auto")`
	}
	return Result{Check: "page cache", OK: true, Detail: detail}
}

// pacing is one line per staging disk: how the window would pace its
// writes there.
func (d Doctor) pacing() []Result {
	if len(d.In.StagingPaths) == 0 {
		return []Result{{Check: "pacing", OK: true, Detail: "staging.paths is empty: no staging disk to pace"}, d.pageCache(d.stagingWindow(nil)), d.ioWeights(window{})}
	}
	disks, err := d.Disks.Disks(d.In.StagingPaths)
	if err != nil {
		return []Result{{Check: "pacing", Skip: true, Detail: "not checked: the staging disks are unknown (see staging disks)"}}
	}
	w := d.stagingWindow(disks)
	var out []Result
	for _, disk := range disks {
		out = append(out, Result{Check: "pacing " + disk, OK: true, Detail: d.describePacing(w, disk)})
	}
	out = append(out, d.pageCache(w), d.ioWeights(w))
	if len(w.cost) > 0 {
		out = append(out, d.modelBrake())
	}
	return out
}

// modelBrake says whether etcd's latency scales the iocost models in the
// window (guard.StepModel, as the stager wires it).
func (d Doctor) modelBrake() Result {
	r := Result{Check: "iocost brake", OK: true}
	switch {
	case !d.In.GuardEnabled:
		r.Detail = "off: the guard is off (guard.enabled = false); a model that overstates the disk is not caught"
	case !d.In.IOCostBrake:
		r.Detail = "off (guard.iocost_brake = false); a model that overstates the disk is not caught"
	default:
		r.Detail = fmt.Sprintf("on: etcd's latency over %gx its normal p99 scales the iocost models down in the window, never below what the other cgroups use by iocost's own books (guard.iocost_brake, guard.latency_factor)", d.In.BrakeFactor)
	}
	return r
}

func (d Doctor) describePacing(w window, disk string) string {
	if slices.Contains(w.cost, disk) {
		src, line := d.modelSource(disk)
		s := "iocost with " + src.String()
		if line != "" {
			s += " (" + line + ")"
		}
		if src != ModelOperator {
			s += " (" + d.modeSaid(len(w.ordered) > 0) + ", no model for " + disk + " in staging.iocost_models)"
		}
		if w.rate == rateFixed {
			s += "; and " + d.fixedCap()
		}
		return s
	}
	var s string
	switch {
	case w.rate == rateLoop:
		s = `the write-rate loop (staging.io_write_bandwidth_max = "auto")`
	case w.rate == rateStart:
		s = `a fixed write cap at guard.rate_start (staging.io_write_bandwidth_max = "auto" without the guard: no loop)`
	case w.rate == rateFixed:
		s = d.fixedCap()
	case !d.In.WriteRateAuto:
		s = `no write cap (staging.io_write_bandwidth_max = "")`
	case len(w.cost) > 0:
		s = fmt.Sprintf("no write cap: iocost on %s paces the window, and no cap goes on the other disks", strings.Join(w.cost, ", "))
	default:
		s = fmt.Sprintf("no write cap: journal orders data (%s); the memory bound and the guard pace staging", strings.Join(w.ordered, "; "))
	}
	s += "; not iocost: " + d.whyNoIOCost(w, disk)
	if w.fsErr != nil && d.In.WriteRateAuto && len(w.cost) == 0 {
		s += fmt.Sprintf("; file systems unknown (%v), counted as not ordering data, as the stager does", w.fsErr)
	}
	return s
}

func (d Doctor) fixedCap() string {
	return fmt.Sprintf("a fixed write cap of %g MB/s (staging.io_write_bandwidth_max)", float64(d.In.WriteBandwidthMax)/1e6)
}

func (d Doctor) whyNoIOCost(w window, disk string) string {
	ordersData := len(w.ordered) > 0
	withModel := iocost.Effective(d.In.IOCost, ordersData) == iocost.WithModel
	switch {
	case d.In.IOCost == iocost.Off:
		return "staging.iocost = false"
	case w.costErr != nil:
		return fmt.Sprintf("the kernel has no iocost (%v)", w.costErr)
	case withModel && len(d.In.IOCostModels) == 0:
		return d.modeSaid(ordersData) + " and staging.iocost_models is empty"
	case withModel:
		return "no model for " + disk + " in staging.iocost_models"
	}
	return d.modeSaid(ordersData)
}

// iocostModels fails a model the window would never load: one for a disk
// not behind staging.paths, or for a partition or stacked device (the
// kernel's io.cost.model takes whole disks, and the stager looks models
// up by the whole disks it resolved).
func (d Doctor) iocostModels() Result {
	const check = "iocost models"
	names := make([]string, 0, len(d.In.IOCostModels))
	for n := range d.In.IOCostModels {
		names = append(names, n)
	}
	slices.Sort(names)
	var disks []string
	if len(d.In.StagingPaths) > 0 {
		var err error
		if disks, err = d.Disks.Disks(d.In.StagingPaths); err != nil {
			return Result{Check: check, Skip: true, Detail: "not checked: the staging disks are unknown (see staging disks)"}
		}
	}
	var probs []string
	for _, n := range names {
		whole, err := d.Disks.WholeDisks(n)
		switch {
		case err == nil && !slices.Equal(whole, []string{n}):
			probs = append(probs, fmt.Sprintf("staging.iocost_models: %s is not a whole disk but on %s: give the model for the whole disk",
				n, strings.Join(whole, ", ")))
		case !slices.Contains(disks, n):
			probs = append(probs, fmt.Sprintf("staging.iocost_models: %s is not a staging disk (staging.paths are on %s)", n, orNothing(disks)))
		}
	}
	if len(probs) > 0 {
		return Result{Check: check, Detail: strings.Join(probs, "; ")}
	}
	return Result{Check: check, OK: true, Detail: fmt.Sprintf("%s: staging disks", strings.Join(names, ", "))}
}

func orNothing(disks []string) string {
	if len(disks) == 0 {
		return "no disk"
	}
	return strings.Join(disks, ", ")
}
