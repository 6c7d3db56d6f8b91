//go:build bench

package latency

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/update-agent/update-agent/tests/bench/report"
	"github.com/update-agent/update-agent/tests/guest"
)

// plainGuest runs the whole plan on one plain guest: the stand-in's
// sysroot on the data disk, made again on each filesystem of the plan.
func (r *run) plainGuest(ctx context.Context, t *testing.T, opts guest.Options, bins Binaries, repo string) {
	r.logf("booting the guest (%d vCPUs)", opts.CPUs)
	g := r.startGuest(ctx, t, opts, bins, repo)
	defer g.Stop()
	var err error
	if err := throttle(ctx, g, r.l, 0, 0); err != nil {
		t.Fatal(err)
	}
	fs := r.plan.Disks[0].FS
	if err := PrepareDisk(ctx, g, fs); err != nil {
		t.Fatal(err)
	}
	r.logf("making the update (%s, %d files)", r.plan.UpdateSize, r.plan.UpdateFile)
	if r.base, r.update, err = MakeUpdates(ctx, g, r.l, r.plan.UpdateSize, r.plan.UpdateFile); err != nil {
		t.Fatal(err)
	}
	for _, d := range r.plan.Disks {
		if d.FS != fs {
			// A new filesystem: the sysroot, etcd and the loads' files are
			// made again on it, unthrottled.
			fs = d.FS
			r.logf("making %s on the data disk", fs)
			if err := throttle(ctx, g, r.l, 0, 0); err != nil {
				t.Fatal(err)
			}
			if err := PrepareDisk(ctx, g, fs); err != nil {
				t.Fatal(err)
			}
		}
		r.disk(ctx, t, d)
	}
}

// ostreeGuest runs the plan's disks on one filesystem on an ostree guest
// with that root filesystem: staging is ostree's deploy into the booted
// sysroot on the throttled root disk. After each disk's scenarios it times
// a reboot with nothing staged and one that finalizes the update; between
// disks the guest returns to the base.
func (r *run) ostreeGuest(ctx context.Context, t *testing.T, opts guest.Options, grp FSGroup, bins Binaries, repo string) {
	// writeback: etcd's and fio's fdatasyncs reach the host disk, as the
	// plain guest's data disk's do ("unsafe" would drop them).
	opts.Ostree, opts.RootFS, opts.RootDiskCache = true, grp.FS, "writeback"
	r.logf("booting the ostree guest, root %s (%d vCPUs)", grp.FS, opts.CPUs)
	g := r.startGuest(ctx, t, opts, bins, repo)
	defer g.Stop()
	var err error
	if out, err := sh(ctx, g, "findmnt -no FSTYPE /sysroot; df -h /sysroot "+DataDir); err == nil {
		r.logf("root filesystem:\n%s", out)
	}
	r.logf("making the update (%s, %d files) over the booted commit", r.plan.UpdateSize, r.plan.UpdateFile)
	if r.base, r.update, err = MakeUpdates(ctx, g, r.l, r.plan.UpdateSize, r.plan.UpdateFile); err != nil {
		t.Fatal(err)
	}
	r.logf("base %s, update %s", r.base, r.update)
	for i, d := range grp.Disks {
		if i > 0 {
			r.logf("%s: returning to the base", d.Name)
			if err := returnToBase(ctx, g, r.l, r.base); err != nil {
				t.Fatal(err)
			}
		}
		r.disk(ctx, t, d)
		if _, err := sh(ctx, g, "systemctl stop bench-etcd"); err != nil {
			t.Fatal(err)
		}
		rs, err := measureReboots(ctx, g, r.l, d, r.base, r.update, r.logf)
		r.reboots = append(r.reboots, rs...)
		r.writeResults(t)
		if err != nil {
			t.Fatal(err)
		}
	}
}

// startGuest boots a guest with opts and installs the binaries and units
// in it; the caller stops it.
func (r *run) startGuest(ctx context.Context, t *testing.T, opts guest.Options, bins Binaries, repo string) *guest.Guest {
	g, err := guest.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.g = g
	r.logf("guest %s (accel %s); installing", g, g.Accel())
	if err := Install(ctx, g, r.l, bins, repo); err != nil {
		g.Stop()
		t.Fatal(err)
	}
	return g
}

// disk runs every scenario of disk d, BENCH_REPS times interleaved, on the
// current guest, and writes its PNGs.
func (r *run) disk(ctx context.Context, t *testing.T, d Disk) {
	g := r.g
	r.panels, r.fioCDF, r.etcdCDF = nil, nil, nil
	r.split = false
	if err := StartEtcd(ctx, g, r.l, r.split); err != nil {
		t.Fatal(err)
	}
	// Unmeasured: the first scenario after boot or a new etcd would
	// otherwise also measure their settling (seen: (a) alone's p99 4x
	// that of the same load measured later in the run).
	if err := warmUp(ctx, g, r.l, d, r.logf); err != nil {
		t.Fatal(err)
	}
	for rep := 1; rep <= r.reps; rep++ {
		for _, sc := range r.plan.Scenarios[d.Name] {
			if err := r.runOne(ctx, d, sc, rep); err != nil {
				// One retry: a run of hours is not lost to one hiccup of
				// the harness (seen once: fio left no report when
				// stopped). The retry is in the log and the notes.
				journal, _ := sh(ctx, g, "journalctl -q --no-pager -o cat -n 20 -u bench-fio -u bench-put -u bench-kstacks")
				r.logf("%s/%s rep %d failed, running it again: %v\nthe loads' (and kstacks') journal:\n%s", d.Name, sc.ID, rep, err, journal)
				r.notes = append(r.notes, fmt.Sprintf("- %s/%s rep %d was run again after: %v", d.Name, sc.ID, rep, err))
				if err := r.runOne(ctx, d, sc, rep); err != nil {
					t.Fatal(err)
				}
			}
			r.writeResults(t)
		}
	}
	r.remeasureNoisyAlone(ctx, t, d)
	var png bytes.Buffer
	if err := report.WritePNG(&png, r.panels); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.out, "latency-"+d.Name+".png"), png.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string][]report.Curve{"fio": r.fioCDF, "etcd": r.etcdCDF} {
		var b bytes.Buffer
		title := fmt.Sprintf("%s: %s WAL fsync latency CDF (first repetition)", d.Name, name)
		if err := report.WriteCDF(&b, title, c); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(r.out, "cdf-"+name+"-"+d.Name+".png"), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// remeasureNoisyAlone measures once more each alone repetition of d that
// is noise beside the others (report.NoisyAlone), replacing its rows; one
// still off is left flagged, and its repetition's ratios use the other
// repetitions' alone medians.
func (r *run) remeasureNoisyAlone(ctx context.Context, t *testing.T, d Disk) {
	var alone Scenario
	for _, sc := range r.plan.Scenarios[d.Name] {
		if sc.ID == report.ScenarioAlone && !sc.FioUnlimited && !sc.SplitFS {
			alone = sc
		}
	}
	if alone.ID == "" {
		return
	}
	seen := map[int]bool{}
	for _, n := range r.table.NoisyAlone() {
		if n.Disk != d.Name || seen[n.Rep] {
			continue
		}
		seen[n.Rep] = true
		r.logf("%s; measuring it again", n)
		r.notes = append(r.notes, fmt.Sprintf("- %s: measured again", n))
		r.table = r.table.Without(d.Name, report.ScenarioAlone, n.Rep)
		r.again = true
		err := r.runOne(ctx, d, alone, n.Rep)
		r.again = false
		if err != nil {
			t.Fatal(err)
		}
		r.writeResults(t)
	}
}
