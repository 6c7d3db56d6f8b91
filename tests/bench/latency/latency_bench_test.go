//go:build bench

package latency

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/bench/fio"
	"github.com/update-agent/update-agent/tests/bench/report"
	"github.com/update-agent/update-agent/tests/guest"
)

// TestStagingLatency is section 1 of the benchmark: every scenario of the
// plan (BENCH_QUICK=1: the quick one), side by side in one guest,
// BENCH_REPS times (default 3) interleaved: a, b, d, a, b, d, ... so that a
// drift of the host over the run spreads over all scenarios instead of
// favouring one. Results (per-rep table, summary with medians and
// min-max, CSV, PNG per disk, markdown) go to $BENCH_OUT.
func TestStagingLatency(t *testing.T) {
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		t.Fatal("BENCH_OUT not set (make bench sets it)")
	}
	quick := os.Getenv("BENCH_QUICK") == "1"
	plan := MakePlan(quick)
	if size := os.Getenv("BENCH_UPDATE_SIZE"); size != "" {
		// Same file size as the 1.2 GiB / 11.5k-file update.
		plan.UpdateSize, plan.UpdateFile = size, FilesFor(size)
	}
	if only := os.Getenv("BENCH_SCENARIOS"); only != "" {
		sweep := Sweep()
		if quick {
			// Pick from the whole sweep, at the quick plan's size and disk,
			// under the fixed-rate load on the shared filesystem only.
			for _, d := range plan.Disks {
				plan.Scenarios[d.Name] = nil
				for _, s := range sweep.Scenarios[d.Name] {
					if !s.FioUnlimited && !s.SplitFS {
						plan.Scenarios[d.Name] = append(plan.Scenarios[d.Name], s)
					}
				}
			}
		} else {
			sweep.UpdateSize, sweep.UpdateFile = plan.UpdateSize, plan.UpdateFile
			plan = sweep
		}
		plan = plan.Only(strings.Split(only, ","))
	}
	// BENCH_DISKS picks disks by name, with or without the filesystem
	// ("500iops-20MBs", "ext4-500iops-20MBs"); BENCH_FS by filesystem.
	for _, f := range []struct {
		env  string
		keep func(d Disk, v string) bool
	}{
		{"BENCH_DISKS", func(d Disk, v string) bool { return d.Name == v || d.Name == d.FS+"-"+v }},
		{"BENCH_FS", func(d Disk, v string) bool { return d.FS == v }},
	} {
		v := os.Getenv(f.env)
		if v == "" {
			continue
		}
		var ds []Disk
		for _, d := range plan.Disks {
			if slices.ContainsFunc(strings.Split(v, ","), func(x string) bool { return f.keep(d, x) }) {
				ds = append(ds, d)
			}
		}
		if len(ds) == 0 {
			t.Fatalf("%s=%s: no such disk in the plan", f.env, v)
		}
		plan.Disks = ds
	}
	// BENCH_LOAD=FIO:PUT sets both loads' rates on every disk of the plan.
	if v := os.Getenv("BENCH_LOAD"); v != "" {
		for i := range plan.Disks {
			var err error
			if plan.Disks[i], err = plan.Disks[i].WithLoad(v); err != nil {
				t.Fatalf("BENCH_LOAD: %v", err)
			}
		}
	}
	reps := 3
	if v := os.Getenv("BENCH_REPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("BENCH_REPS=%q: want a count >= 1", v)
		}
		reps = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(4*reps)*time.Hour)
	defer cancel()
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	logf := func(format string, args ...any) {
		fmt.Printf("bench %s: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
	}

	layout, err := LayoutFor(os.Getenv("BENCH_GUEST"))
	if err != nil {
		t.Fatal(err)
	}
	if err := layout.Check(plan); err != nil {
		t.Fatal(err)
	}
	logf("building binaries")
	bins, err := Build(ctx, repo, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// BENCH_GUEST_CPUS: the guest's vCPUs (default 2, one per host core
	// here). Under TCG each busy vCPU is a busy host core, and qemu's I/O
	// emulation needs one too.
	cpus := 2
	if v := os.Getenv("BENCH_GUEST_CPUS"); v != "" {
		if cpus, err = strconv.Atoi(v); err != nil || cpus < 1 {
			t.Fatalf("BENCH_GUEST_CPUS=%q: want a count >= 1", v)
		}
	}
	r := &run{l: layout, plan: plan, out: out, logf: logf, profile: os.Getenv("BENCH_PROFILE") == "1", quick: quick, reps: reps}
	opts := guest.Options{DataDiskSize: 12 << 30, MemoryMiB: 4096, CPUs: cpus}
	if layout.Ostree {
		for _, grp := range GroupByFS(plan.Disks) {
			r.ostreeGuest(ctx, t, opts, grp, bins, repo)
		}
	} else {
		r.plainGuest(ctx, t, opts, bins, repo)
	}
	fmt.Println()
	if err := r.table.WriteText(os.Stdout); err != nil {
		t.Fatal(err)
	}
	fmt.Println()
	if err := r.table.WriteSummary(os.Stdout); err != nil {
		t.Fatal(err)
	}
	if len(r.reboots) > 0 {
		fmt.Println()
		fmt.Print(RebootTable(r.reboots))
	}
}

// run is what one benchmark run accumulates.
type run struct {
	g                 *guest.Guest // the current guest
	l                 Layout
	plan              Plan
	quick             bool
	reps              int
	base, update, out string
	logf              func(string, ...any)
	split             bool // etcd on its own filesystem now
	profile           bool // BENCH_PROFILE=1: kernel stacks in every scenario, CPU profiles of the agent's
	table             report.Table
	notes             []string
	panels            []report.Panel // of the disk being measured (first repetition)
	fioCDF, etcdCDF   []report.Curve
	reboots           []Reboot // the ostree guest's timed reboots
	again             bool     // measuring a noisy repetition again: no second panel or curve
}

// runOne runs one repetition of one scenario and adds its rows, log, note
// and (first repetition only) timeline panel.
func (r *run) runOne(ctx context.Context, d Disk, sc Scenario, rep int) error {
	g, logf := r.g, r.logf
	if sc.SplitFS != r.split {
		r.split = sc.SplitFS
		if err := StartEtcd(ctx, g, r.l, r.split); err != nil {
			return err
		}
	}
	sc.Profile = r.profile
	m, err := runScenario(ctx, g, r.l, d, sc, r.plan, r.base, r.update, logf)
	if err != nil {
		return fmt.Errorf("%s/%s rep %d: %v", d.Name, sc.ID, rep, err)
	}
	m.Rep = rep
	rows, err := m.Rows()
	if err != nil {
		return err
	}
	r.table.Rows = append(r.table.Rows, rows...)
	if d.IOPS == ScaleModel.IOPS && d.BPS == ScaleModel.BPS && !slices.Contains(r.table.ScaleModel, d.Name) {
		r.table.ScaleModel = append(r.table.ScaleModel, d.Name)
	}
	base := filepath.Join(r.out, "logs", LogBase(d, sc, rep))
	for _, f := range []struct {
		name string
		b    []byte
	}{{base + ".log", m.StageLog}, {base + ".pprof", m.Profile}, {base + "-kstacks.txt", m.KStacks}} {
		if len(f.b) == 0 {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(f.name), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f.name, f.b, 0o644); err != nil {
			return err
		}
	}
	if rep == 1 && !r.again {
		p, err := m.Panel()
		if err != nil {
			return err
		}
		r.panels = append(r.panels, p)
		fc, ec, err := m.Curves()
		if err != nil {
			return err
		}
		fc.Label += " " + sc.Load(d)
		r.fioCDF, r.etcdCDF = append(r.fioCDF, fc), append(r.etcdCDF, ec)
	}
	if m.Window.Summary != "" {
		r.notes = append(r.notes, fmt.Sprintf("- %s/%s rep %d: %s", d.Name, sc.ID, rep, m.Window.Summary))
	}
	trace, err := RateTrace(m.StageLog)
	if err != nil {
		return fmt.Errorf("%s/%s rep %d: %w", d.Name, sc.ID, rep, err)
	}
	if trace != "" {
		r.notes = append(r.notes, fmt.Sprintf("- %s/%s rep %d: %s", d.Name, sc.ID, rep, trace))
	}
	if sc.Stager != NoStaging {
		// What the measured disk wrote while staging ran, all writers
		// together: on the ostree guest, each staging pulls every object of
		// the update again (Reset prunes them), so about its size or more.
		r.notes = append(r.notes, fmt.Sprintf("- %s/%s rep %d: %s wrote %.0f MiB during the staging", d.Name, sc.ID, rep, r.l.Dev, float64(m.Window.Written)/(1<<20)))
	}
	logf("%s/%s rep %d: fio p99 %v max %v, etcd p99 %v, setup %v, staging %v (%s wrote %.0f MiB), agent CPU %v", d.Name, sc.ID, rep,
		rows[0].P99, rows[0].Max, rows[1].P99, rows[1].Setup.Round(10*time.Millisecond),
		m.Window.Duration().Round(100*time.Millisecond), r.l.Dev, float64(m.Window.Written)/(1<<20), m.Window.AgentCPU.Round(10*time.Millisecond))
	return nil
}

func runScenario(ctx context.Context, g Guest, l Layout, d Disk, sc Scenario, plan Plan, base, update string, logf func(string, ...any)) (Measured, error) {
	logf("%s/%s (%s, %s): resetting", d.Name, sc.ID, sc.Stager, sc.Load(d))
	// Resetting writes (a small base deployment, a prune): unthrottled,
	// then the disk's setting for the measurement.
	if err := throttle(ctx, g, l, 0, 0); err != nil {
		return Measured{}, err
	}
	if err := Reset(ctx, g, l, base, update); err != nil {
		return Measured{}, err
	}
	if err := ResetIOCostVrate(ctx, g); err != nil {
		return Measured{}, err
	}
	if sc.LearnedFrom != "" {
		if err := RestoreLearned(ctx, g, d.Name, sc.LearnedFrom); err != nil {
			return Measured{}, err
		}
	}
	if sc.BootScheduler != "" {
		// Before the loads, as at boot: no queue to drain.
		if err := selectScheduler(ctx, g, l.Dev, sc.BootScheduler); err != nil {
			return Measured{}, err
		}
	}
	if err := throttle(ctx, g, l, d.IOPS, d.BPS); err != nil {
		return Measured{}, err
	}
	dir := l.ResultDir + "/" + d.Name + "/" + sc.ID + "-" + strings.ReplaceAll(sc.Load(d), "/", "")
	fioDir := l.fioDir(sc)
	job := fio.WALJob{Name: "etcdlike", Dir: fioDir, Runtime: 4 * time.Hour, RateIOPS: d.FioRate, LatLog: dir + "/fio"}
	if sc.FioUnlimited {
		job.RateIOPS = 0
	}
	m := Measured{Disk: d, Scenario: sc, PutRate: d.PutRate}
	loads, err := StartLoads(ctx, g, dir, fioDir, job.Args(), m.PutRate)
	if err != nil {
		return Measured{}, err
	}
	m.Loads = loads
	stopped := false
	defer func() {
		if !stopped {
			if sc.Profile {
				StopKStacks(context.Background(), g)
			}
			StopLoads(context.Background(), g)
		}
	}()
	if sc.Profile {
		// From here to just before the loads stop: their whole run, in
		// every scenario, (a) alone included.
		if err := StartKStacks(ctx, g, l, dir); err != nil {
			return Measured{}, err
		}
	}
	// Let the loads settle (and the guard learn its baseline) before staging.
	time.Sleep(5 * time.Second)
	if sc.Stager == NoStaging {
		logf("%s/%s: loads alone for %v", d.Name, sc.ID, plan.AloneFor)
		if m.AloneIO, err = aloneIO(ctx, g, l, plan.AloneFor); err != nil {
			return Measured{}, err
		}
	} else {
		logf("%s/%s: staging", d.Name, sc.ID)
		if m.Window, err = Stage(ctx, g, l, sc); err != nil {
			return Measured{}, err
		}
		time.Sleep(3 * time.Second)
	}
	if sc.Profile {
		if err := StopKStacks(ctx, g); err != nil {
			return Measured{}, err
		}
	}
	stopped = true
	if err := StopLoads(ctx, g); err != nil {
		return Measured{}, err
	}
	if err := FetchLoads(ctx, g, dir, &m); err != nil {
		return Measured{}, err
	}
	if sc.Profile {
		if m.KStacks, err = FetchKStacks(ctx, g, dir); err != nil {
			return Measured{}, err
		}
	}
	if sc.Stager == Agent || sc.Stager == Companion {
		if m.StageLog, err = Fetch(ctx, g, l.stageLog()); err != nil {
			return Measured{}, err
		}
		if err := KeepLearned(ctx, g, d.Name, sc.ID); err != nil {
			return Measured{}, err
		}
		if sc.Profile {
			if m.Profile, err = FetchBinary(ctx, g, l.profilePath()); err != nil {
				return Measured{}, err
			}
		}
	}
	return m, nil
}

// warmUp runs the loads on d for a while, unmeasured.
func warmUp(ctx context.Context, g Guest, l Layout, d Disk, logf func(string, ...any)) error {
	if err := throttle(ctx, g, l, d.IOPS, d.BPS); err != nil {
		return err
	}
	logf("%s: warming up for %v", d.Name, warmUpFor)
	job := fio.WALJob{Name: "etcdlike", Dir: l.FioDir, Runtime: 4 * time.Hour, RateIOPS: d.FioRate}
	if _, err := StartLoads(ctx, g, l.ResultDir+"/warmup", l.FioDir, job.Args(), d.PutRate); err != nil {
		return err
	}
	time.Sleep(warmUpFor)
	return StopLoads(ctx, g)
}

const warmUpFor = 45 * time.Second

// writeResults (re)writes the table as CSV and markdown after every
// scenario, so an interrupted run keeps what it measured.
func (r *run) writeResults(t *testing.T) {
	t.Helper()
	out, table, notes, plan, quick, reps := r.out, r.table, r.notes, r.plan, r.quick, r.reps
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	var c bytes.Buffer
	if err := table.WriteCSV(&c); err != nil {
		t.Fatal(err)
	}
	var txt, sum bytes.Buffer
	if err := table.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if err := table.WriteSummary(&sum); err != nil {
		t.Fatal(err)
	}
	mode := "full"
	if quick {
		mode = "quick (BENCH_QUICK=1)"
	}
	md := fmt.Sprintf("## Staging vs etcd fsync latency\n\nMode: %s; guest: %s; update %s in %d files; %d repetitions, interleaved; disks throttled by qemu; fio etcd-like job (2300 B write + fdatasync) and a real etcd member under a fixed put rate, side by side. Latencies in ms; ratios to (a) alone and (b) naive of the same disk, load and repetition. etcd's max is a histogram bucket bound. setup: the agent opening the window (its own phase); setup_p99/a: etcd's worst per-scrape p99 (2 s scrapes) while it ran, against (a)'s typical worst of as many consecutive scrapes (the median of their worst), not (a)'s p99 over the whole run, which a single 2 s window's p99 exceeds by itself; achieved/asked: the load's rate (fio: fdatasyncs; etcd: puts served, not its WAL fsyncs, which batch puts) against the one asked for; agent_cpu_s: update-agent's user + system CPU for the staging.\n\nSummary, median [min-max] over the repetitions:\n\n```\n%s```\n\nEach repetition:\n\n```\n%s```\n\nupdate-agent stage-once reports and what the measured disk wrote while staging:\n%s\n%s",
		mode, r.l.Describe(), plan.UpdateSize, plan.UpdateFile, reps, sum.String(), txt.String(), strings.Join(notes, "\n"), rebootSection(r.reboots))
	for name, b := range map[string][]byte{"latency.csv": c.Bytes(), "latency.md": []byte(md)} {
		if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
