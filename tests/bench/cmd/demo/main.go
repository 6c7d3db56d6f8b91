// Command demo is `make demo`: it boots the qemu test guest with a real etcd
// member on a small throttled cloud-like disk (500 IOPS, 20 MB/s), publishes
// an OS update through the rpm-ostree stand-in, and lets update-agent (as
// update-agent.service, the shipped unit) do one full update: gentle staging
// under the latency guard, the reboot slot from the etcd lock, the
// finalization and reboot, the post-boot checks and the release. It prints
// what happened as a timeline read from the guest's journal, then the fsync
// latency table of the run (etcd-like fio job and the etcd member, with
// nothing staged and while update-agent staged).
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/update-agent/update-agent/tests/bench/fio"
	"github.com/update-agent/update-agent/tests/bench/latency"
	"github.com/update-agent/update-agent/tests/bench/report"
	"github.com/update-agent/update-agent/tests/guest"
	"github.com/update-agent/update-agent/tests/modroot"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "\ndemo FAILED:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) {
	fmt.Printf("==> %s %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// The small cloud disk of the benchmarks.
var disk = latency.Disks[1]

const putRate = 20

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	repo, err := modroot.Dir()
	if err != nil {
		return err
	}
	size := envOr("DEMO_UPDATE_SIZE", "600MiB")
	work, err := os.MkdirTemp("", "ua-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	say("building update-agent, the rpm-ostree stand-in, mkupdate, putload and etcd %s", latency.EtcdVersion)
	bins, err := latency.Build(ctx, repo, filepath.Join(work, "bin"))
	if err != nil {
		return err
	}
	say("booting the Debian test guest under qemu (first run builds its image: a few minutes)")
	g, err := guest.Start(ctx, guest.Options{MemoryMiB: 4096, DataDiskSize: 12 << 30})
	if err != nil {
		return err
	}
	defer g.Stop()
	say("guest up (%s); installing update-agent.service, the stand-in's rpm-ostreed.service and an etcd member", g.Accel())
	if err := latency.Install(ctx, g, latency.Plain, bins, repo); err != nil {
		return err
	}
	if err := persistAcrossReboot(ctx, g); err != nil {
		return err
	}
	say("publishing an OS update of %s (rpm-ostree stand-in, real ostree)", size)
	base, update, err := latency.MakeUpdates(ctx, g, latency.Plain, size, latency.FilesFor(size))
	if err != nil {
		return err
	}
	if err := latency.Reset(ctx, g, latency.Plain, base, update); err != nil {
		return err
	}
	if err := latency.StartEtcd(ctx, g, latency.Plain, false); err != nil {
		return err
	}
	say("throttling the data disk like a small cloud disk: %d IOPS, %d MB/s (qemu, outside the guest)", disk.IOPS, disk.BPS/1_000_000)
	if err := g.SetThrottle(ctx, disk.IOPS, disk.BPS); err != nil {
		return err
	}
	job := func(dir string) []string {
		return fio.WALJob{Name: "etcdlike", Dir: latency.DataDir + "/fio", Runtime: 2 * time.Hour, RateIOPS: disk.FioRate, LatLog: dir + "/fio"}.Args()
	}

	say("baseline: etcd under %d puts/s and an etcd-like fio job at %d fdatasync/s, nothing staged, 30 s", putRate, disk.FioRate)
	alone, err := measure(ctx, g, "/var/tmp/bench/demo-alone", job, func() (latency.Window, error) {
		t0, err := latency.DiskStamp(ctx, g, latency.Plain)
		if err != nil {
			return latency.Window{}, err
		}
		time.Sleep(30 * time.Second)
		t1, err := latency.DiskStamp(ctx, g, latency.Plain)
		if err != nil {
			return latency.Window{}, err
		}
		io, err := latency.IOBetween(t0, t1)
		return latency.Window{IO: io}, err
	})
	if err != nil {
		return err
	}
	alone.Scenario = latency.Scenario{ID: report.ScenarioAlone}
	alone.AloneIO = alone.Window.IO // the loads' own I/O rate, for the staging's floor

	if err := writeAgentConfig(ctx, g); err != nil {
		return err
	}
	var since int64
	agentRun, err := measure(ctx, g, "/var/tmp/bench/demo-agent", job, func() (latency.Window, error) {
		out, err := sh(ctx, g, "date +%s")
		if err != nil {
			return latency.Window{}, err
		}
		fmt.Sscan(strings.TrimSpace(out), &since)
		say("systemctl start update-agent: the agent takes it from here (following its journal)")
		t0, err := latency.DiskStamp(ctx, g, latency.Plain)
		if err != nil {
			return latency.Window{}, err
		}
		if _, err := sh(ctx, g, "systemctl start update-agent"); err != nil {
			return latency.Window{}, err
		}
		w, err := followUntilStaged(ctx, g)
		if err != nil {
			return w, err
		}
		// From the start to the journal's staged: the staging's I/O,
		// and the floor it is measured against.
		t1, err := latency.DiskStamp(ctx, g, latency.Plain)
		if err == nil {
			w.IO, err = latency.IOBetween(t0, t1)
		}
		return w, err
	})
	if err != nil {
		return err
	}
	agentRun.Scenario = latency.Scenario{ID: report.ScenarioAgent, Stager: latency.Agent}
	if err := followUntilReleased(ctx, g); err != nil {
		return err
	}

	say("timeline (from the guest's journal, both boots)")
	if err := printTimeline(ctx, g, since); err != nil {
		return err
	}
	var table report.Table
	for _, m := range []latency.Measured{alone, agentRun} {
		rows, err := m.Rows()
		if err != nil {
			return err
		}
		table.Rows = append(table.Rows, rows...)
	}
	say("WAL fdatasync latency in this run (ms; etcd's max is its histogram bucket bound)")
	if err := table.WriteText(os.Stdout); err != nil {
		return err
	}
	for _, c := range table.Targets() {
		fmt.Println(c)
	}
	fmt.Println("\nOne run each: `make bench` repeats every scenario, interleaved, and reports medians with min-max.")
	fmt.Println("The staging-time target needs a naive staging to compare with: `make bench` measures it side by side.")
	return nil
}

// measure runs the loads around body and fetches what they recorded.
func measure(ctx context.Context, g *guest.Guest, dir string, job func(string) []string, body func() (latency.Window, error)) (latency.Measured, error) {
	m := latency.Measured{Disk: disk, PutRate: putRate}
	loads, err := latency.StartLoads(ctx, g, dir, latency.Plain.FioDir, job(dir), putRate)
	if err != nil {
		return m, err
	}
	m.Loads = loads
	time.Sleep(5 * time.Second)
	w, err := body()
	if err != nil {
		latency.StopLoads(context.Background(), g)
		return m, err
	}
	m.Window = w
	if err := latency.StopLoads(ctx, g); err != nil {
		return m, err
	}
	return m, latency.FetchLoads(ctx, g, dir, &m)
}

func sh(ctx context.Context, g *guest.Guest, cmd string) (string, error) {
	out, errOut, code, err := g.Run(ctx, cmd)
	if err != nil {
		return out, err
	}
	if code != 0 {
		return out, fmt.Errorf("guest: %q exited %d: %s", cmd, code, strings.TrimSpace(errOut))
	}
	return out, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
