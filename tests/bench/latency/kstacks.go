package latency

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/update-agent/update-agent/tests/bench/kstacks"
)

// Units in the guest: the etcd member (Install), the fio job (StartLoads)
// and the kernel-stack sampler (StartKStacks).
const (
	etcdUnit = "bench-etcd.service"
	fioUnit  = "bench-fio.service"
	// rpmOstreedUnit is the stand-in's daemon (Install), which writes the
	// update in every staging scenario.
	rpmOstreedUnit = "rpm-ostreed.service"
	kstacksUnit    = "bench-kstacks.service"
)

// kstacksSummary is the sampler's summary in a scenario's result dir.
func kstacksSummary(dir string) string { return dir + "/kstacks.json" }

// kstacksArgs is the sampler's command line (tests/bench/cmd/kstacks) for
// a scenario whose results go to dir: every 100 ms, the threads of etcd's
// and the fio job's units (fio forks its job: the unit's cgroup has both),
// of rpm-ostreed (the stand-in's daemon pulls and checks out, whoever asks
// it to stage), the journal threads of the measured disk's filesystems
// (ext4's jbd2, XFS's xfsaild), the kernel's workers (write-back's
// flushers among them: their CPU is in no cgroup, and staging makes it),
// update-agent itself, and the measured disk's requests in flight.
func (l Layout) kstacksArgs(dir string) []string {
	return []string{"/usr/local/bin/kstacks", "-interval", "100ms", "-disk", l.Dev,
		"-cgroup", "etcd=" + path.Join("system.slice", etcdUnit),
		"-cgroup", "fio=" + path.Join("system.slice", fioUnit),
		"-cgroup", "rpm-ostreed=" + path.Join("system.slice", rpmOstreedUnit),
		"-comm", "jbd2=jbd2/" + l.Dev + "*",
		"-comm", "xfsaild=xfsaild/" + l.Dev + "*",
		"-comm", "kworker=kworker/*",
		"-comm", "update-agent=update-agent",
		"-out", kstacksSummary(dir)}
}

// debugStats is blk_cgroup's switch that adds iocost's per-cgroup figures
// (cost.wait, cost.indebt, cost.indelay) to io.stat: whether iocost held
// a cgroup's bios. Profile runs only.
const debugStats = "/sys/module/blk_cgroup/parameters/blkcg_debug_stats"

// StartKStacks starts the sampler in the background for a scenario whose
// loads StartLoads started with results in dir (BENCH_PROFILE=1): a unit
// of its own at nice 19 and one Go P, so that its own CPU takes as little
// as it can from etcd's in a CPU-starved guest.
func StartKStacks(ctx context.Context, g Guest, l Layout, dir string) error {
	_, err := sh(ctx, g, "systemctl stop "+kstacksUnit+" 2>/dev/null; rm -f "+q(kstacksSummary(dir))+
		" && { ! test -e "+debugStats+" || echo 1 > "+debugStats+"; }"+
		" && systemd-run -q --unit="+kstacksUnit+" --collect -p Nice=19 -E GOMAXPROCS=1 -- "+strings.Join(quoteAll(l.kstacksArgs(dir)), " "))
	return err
}

// StopKStacks stops the sampler (it writes its summary on SIGTERM,
// systemd's default stop signal) and waits until it is gone.
func StopKStacks(ctx context.Context, g Guest) error {
	_, err := sh(ctx, g, `systemctl stop `+kstacksUnit+` 2>/dev/null; for i in $(seq 1 60); do systemctl -q is-active `+kstacksUnit+` || exit 0; sleep 0.5; done; exit 1`)
	return err
}

// FetchKStacks reads the summary the sampler of dir wrote and renders it
// as text (kstacks.Summary.Render). No summary, or one that sampled no
// thread of etcd or of the fio job, is an error: no partial data.
func FetchKStacks(ctx context.Context, g Guest, dir string) ([]byte, error) {
	b, err := Fetch(ctx, g, kstacksSummary(dir))
	if err != nil {
		return nil, fmt.Errorf("kernel stacks: %w", err)
	}
	s, err := kstacks.Decode(b, "etcd", "fio")
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := s.Render(&out, 12); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// LogBase is the name, without extension, of a scenario repetition's
// files in the results' logs/: the stager's log (.log), stage-once's CPU
// profile (.pprof) and the kernel stacks (-kstacks.txt).
func LogBase(d Disk, sc Scenario, rep int) string {
	return fmt.Sprintf("%s-%s-%s-rep%d", d.Name, sc.ID, strings.ReplaceAll(sc.Load(d), "/", ""), rep)
}
