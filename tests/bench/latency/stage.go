package latency

import (
	"context"
	"encoding/base64"
	"fmt"
	"github.com/update-agent/update-agent/tests/bench/report"
	"strconv"
	"strings"
	"time"
)

// recipe2020 is OpenShift's 2020 mitigation: bfq on the disk, the daemon at
// Nice=10 and best-effort priority 6, per-object fsync in the host repo.
func recipe2020(ctx context.Context, g Guest, l Layout) error {
	dropIn := "[Service]\nNice=10\nIOSchedulingClass=best-effort\nIOSchedulingPriority=6\n"
	if err := writeFile(ctx, g, "/run/systemd/system/rpm-ostreed.service.d/50-recipe2020.conf", dropIn); err != nil {
		return err
	}
	_, err := sh(ctx, g, strings.Join([]string{
		"echo bfq > /sys/block/" + l.Dev + "/queue/scheduler",
		"ostree config --repo=" + l.Repo + " set core.per-object-fsync true",
		"systemctl daemon-reload",
		"systemctl restart rpm-ostreed",
	}, " && "))
	return err
}

// Window is when staging ran, in the guest's clock (Unix ns).
type Window struct {
	Start, End int64
	Summary    string // update-agent stage-once's report line (guard freezes)
	// AgentCPU is update-agent's user + system CPU time for the staging
	// (the shell's `times` for its children; 0 for other stagers).
	AgentCPU time.Duration
	// Written is what the measured disk wrote during the staging
	// (/sys/block/DEV/stat), all writers together: on the ostree guest,
	// about the update's size when every object was pulled again.
	Written int64
	// IO is every read and write the disk did in the window, all
	// processes together: qemu's throttle counts both (iops-total,
	// bps-total), and so does the staging's physical floor.
	IO report.DiskIO
}

// Duration of the window.
func (w Window) Duration() time.Duration { return time.Duration(w.End - w.Start) }

// stampFields are a stamp's: the time (Unix ns), then /sys/block/DEV/stat's
// reads completed, sectors read, writes completed, sectors written.
const stampFields = 5

// parseWindow reads the last line of a staging command's output: two
// stamps, before and after.
func parseWindow(out string) (Window, error) {
	f := strings.Fields(lastLine(out))
	if len(f) != 2*stampFields {
		return Window{}, fmt.Errorf("staging window: %q", out)
	}
	var v [2 * stampFields]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return Window{}, fmt.Errorf("staging window: %q", out)
		}
		v[i] = n
	}
	a, b := v[:stampFields], v[stampFields:]
	return Window{Start: a[0], End: b[0], Written: (b[4] - a[4]) * 512,
		IO: report.DiskIO{IOs: (b[1] - a[1]) + (b[3] - a[3]), Bytes: ((b[2] - a[2]) + (b[4] - a[4])) * 512,
			Span: time.Duration(b[0] - a[0])}}, nil
}

// stamp prints the time (Unix ns) and the disk dev's reads, sectors read,
// writes and sectors written.
func stamp(dev string) string {
	return `echo $(date +%s%N) $(awk '{print $1, $3, $5, $7}' /sys/block/` + dev + `/stat)`
}

// DiskStamp reads the guest's clock and l's disk counters (stamp).
func DiskStamp(ctx context.Context, g Guest, l Layout) (string, error) {
	out, err := sh(ctx, g, stamp(l.Dev))
	return strings.TrimSpace(out), err
}

// IOBetween is what the disk did between two DiskStamps.
func IOBetween(a, b string) (report.DiskIO, error) {
	w, err := parseWindow(a + " " + b)
	return w.IO, err
}

// aloneIO is what the disk did over d with the loads alone.
func aloneIO(ctx context.Context, g Guest, l Layout, d time.Duration) (report.DiskIO, error) {
	t0, err := DiskStamp(ctx, g, l)
	if err != nil {
		return report.DiskIO{}, err
	}
	time.Sleep(d)
	t1, err := DiskStamp(ctx, g, l)
	if err != nil {
		return report.DiskIO{}, err
	}
	return IOBetween(t0, t1)
}

// Stage stages the update as scenario s says and returns the window.
func Stage(ctx context.Context, g Guest, l Layout, s Scenario) (Window, error) {
	t0 := "t0=$(" + stamp(l.Dev) + ")"
	t1 := "t1=$(" + stamp(l.Dev) + ")"
	switch s.Stager {
	case Naive, Recipe2020:
		if s.Stager == Recipe2020 {
			if err := recipe2020(ctx, g, l); err != nil {
				return Window{}, err
			}
		}
		upLog := l.Scratch + "/bench-upgrade.log"
		out, err := sh(ctx, g, t0+`; rpm-ostree upgrade >`+upLog+` 2>&1 || { cat `+upLog+` >&2; exit 1; }; `+t1+`; echo $t0 $t1`)
		if err != nil {
			return Window{}, fmt.Errorf("staging (%s): %w", s.Stager, err)
		}
		return parseWindow(out)
	case Agent:
		if err := writeFile(ctx, g, "/etc/update-agent/config.d/50-bench.toml", l.agentBase()); err != nil {
			return Window{}, err
		}
		if s.AgentConfig != "" {
			if err := writeFile(ctx, g, "/etc/update-agent/config.d/60-scenario.toml", s.AgentConfig); err != nil {
				return Window{}, err
			}
		}
		// The agent's own staging path (policy, scheduler, drop-in, guard),
		// without lock or reboot; it undoes its policy before it exits.
		cmd := "update-agent stage-once"
		if s.Wrap != "" {
			cmd = s.Wrap + " " + cmd
		}
		prof, base := l.profilePath(), l.Scratch+"/bench-stage"
		if s.Profile {
			cmd += " --cpuprofile " + prof
		}
		out, err := sh(ctx, g, `mkdir -p `+l.Scratch+`; rm -f `+prof+`; `+t0+`; `+cmd+` >`+base+`.out 2>`+l.stageLog()+` || { tail -n 40 `+l.stageLog()+` >&2; exit 1; }; `+t1+`; times >`+base+`.times; cat `+base+`.out; echo $t0 $t1`)
		if err != nil {
			return Window{}, fmt.Errorf("staging (update-agent stage-once): %w", err)
		}
		w, err := parseWindow(out)
		if err != nil {
			return Window{}, err
		}
		w.Summary = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(out), lastLine(out)))
		times, err := sh(ctx, g, "cat "+base+".times")
		if err != nil {
			return Window{}, err
		}
		if w.AgentCPU, err = ChildrenCPU(times); err != nil {
			return Window{}, err
		}
		return w, nil
	case Companion:
		return stageCompanion(ctx, g, l, s, t0, t1)
	case CPUBurn:
		var props []string
		for _, p := range strings.Split(s.Burn, "\n") {
			props = append(props, "-p "+q(p))
		}
		n, err := sh(ctx, g, "nproc")
		if err != nil {
			return Window{}, err
		}
		// One sha256sum of /dev/zero per CPU: all CPU, no I/O. ($$ is a $
		// to systemd, which expands the command line.)
		out, err := sh(ctx, g, fmt.Sprintf(`%s; systemd-run -q --wait --collect --unit=bench-burn %s -- /bin/sh -c 'for i in $$(seq 1 %s); do timeout %d sha256sum /dev/zero & done; wait' >/dev/null 2>&1; %s; echo $t0 $t1`,
			t0, strings.Join(props, " "), strings.TrimSpace(n), int(BurnFor.Seconds()), t1))
		if err != nil {
			return Window{}, fmt.Errorf("burning CPU: %w", err)
		}
		return parseWindow(out)
	}
	return Window{}, fmt.Errorf("scenario %s stages nothing", s.ID)
}

// Loads are the etcd-like fio job and the put load on the etcd member,
// running as units so a scenario's policy can tell them from the stager.
type Loads struct {
	Dir     string // result directory in the guest
	StartNS int64  // guest clock when the loads started
}

// StartLoads starts both loads; results go to dir.
func StartLoads(ctx context.Context, g Guest, dir, fioDir string, job []string, putRate int) (Loads, error) {
	// fio stops on its trigger file (StopLoads), from its main loop: a
	// SIGINT runs fio's handler in the job process too, which allocates
	// and writes (not async-signal-safe), and 2 stops in ~40 hung past
	// systemd's 90 s stop timeout, losing the report. The verify state
	// the trigger saves goes to the job's directory.
	fio := "fio " + strings.Join(quoteAll(job), " ") + " --output=" + q(dir+"/fio.json") +
		" --trigger-file=" + fioStopFile + " --aux-path=" + q(fioDir)
	out, err := sh(ctx, g, strings.Join([]string{
		"rm -rf " + q(dir) + " && mkdir -p " + q(dir),
		"rm -rf " + q(fioDir) + " && mkdir -p " + q(fioDir),
		"rm -f " + fioStopFile,
		"echo $(date +%s%N)",
		// The fallback SIGINT to fio's main process alone (it sleeps
		// between polls), the job's kept from the handler.
		"systemd-run -q --unit=bench-fio --collect -p KillSignal=SIGINT -p KillMode=mixed -p TimeoutStopSec=150 -- " + fio,
		fmt.Sprintf("systemd-run -q --unit=bench-put --collect -- /usr/local/bin/putload -rate %d -out %s", putRate, q(dir+"/etcd")),
	}, " && "))
	if err != nil {
		return Loads{}, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(strings.Split(strings.TrimSpace(out), "\n")[0]), 10, 64)
	if err != nil {
		return Loads{}, fmt.Errorf("load start time: %q", out)
	}
	return Loads{Dir: dir, StartNS: ns}, nil
}

// fioStopFile is fio's trigger file: its existence ends the job.
const fioStopFile = "/run/bench-fio.stop"

// StopLoads stops both loads (fio on its trigger file, writing its report;
// putload writes its last scrape on SIGTERM) and waits until they are
// gone. A fio still running after 120 s leaves its threads' kernel stacks
// in the error (a wait in the kernel or a deadlock in fio) before systemd
// stops it.
func StopLoads(ctx context.Context, g Guest) error {
	_, err := sh(ctx, g, `touch `+fioStopFile+`; systemctl stop bench-put 2>/dev/null
for i in $(seq 1 240); do systemctl -q is-active bench-fio bench-put || exit 0; sleep 0.5; done
for t in $(cat /sys/fs/cgroup/system.slice/`+fioUnit+`/cgroup.threads 2>/dev/null); do
  echo "== fio thread $t $(grep State /proc/$t/status) wchan=$(cat /proc/$t/wchan)"; cat /proc/$t/stack
done >&2
systemctl stop bench-fio 2>/dev/null; exit 1`)
	if err != nil {
		return fmt.Errorf("stopping the loads (fio not done 120 s after its trigger file): %w", err)
	}
	return nil
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = q(s)
	}
	return out
}

// profilePath is where stage-once writes its CPU profile in the guest,
// stageLog its log.
func (l Layout) profilePath() string { return l.Scratch + "/bench-stage.pprof" }
func (l Layout) stageLog() string    { return l.Scratch + "/bench-stage.log" }

// FetchBinary copies a binary file out of the guest (base64 on the way).
func FetchBinary(ctx context.Context, g Guest, path string) ([]byte, error) {
	out, err := sh(ctx, g, "base64 -w0 "+q(path))
	if err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(strings.TrimSpace(out))
}

// Fetch copies a file out of the guest by printing it.
func Fetch(ctx context.Context, g Guest, path string) ([]byte, error) {
	out, err := sh(ctx, g, "cat "+q(path))
	return []byte(out), err
}

// ChildrenCPU reads the shell's `times` output (bash: "0m1.234s 0m0.567s",
// dash: "0m1.234000s 0m0.567000s"; the second line is the children's user
// and system time) into their sum.
func ChildrenCPU(times string) (time.Duration, error) {
	lines := strings.Split(strings.TrimSpace(times), "\n")
	if len(lines) < 2 {
		return 0, fmt.Errorf("times output %q: want two lines", times)
	}
	var total time.Duration
	f := strings.Fields(lines[1])
	if len(f) != 2 {
		return 0, fmt.Errorf("times output %q", times)
	}
	for _, v := range f {
		m, s, ok := strings.Cut(strings.TrimSuffix(v, "s"), "m")
		mins, err1 := strconv.Atoi(m)
		secs, err2 := strconv.ParseFloat(s, 64)
		if !ok || err1 != nil || err2 != nil {
			return 0, fmt.Errorf("times output %q", times)
		}
		total += time.Duration((float64(mins)*60 + secs) * float64(time.Second))
	}
	return total, nil
}

// FetchLoads reads what the loads started by StartLoads(dir) recorded into
// m, once StopLoads has made them write it out. The bench and the demo
// share it, so a new record reaches both.
func FetchLoads(ctx context.Context, g Guest, dir string, m *Measured) error {
	for _, f := range []struct {
		dst  *[]byte
		path string
	}{
		{&m.FioJSON, dir + "/fio.json"}, {&m.FioLat, dir + "/fio_lat.1.log"},
		{&m.EtcdPre, dir + "/etcd/before.txt"}, {&m.EtcdPost, dir + "/etcd/after.txt"},
		{&m.EtcdLine, dir + "/etcd/timeline.csv"}, {&m.EtcdPuts, dir + "/etcd/summary.json"},
	} {
		var err error
		if *f.dst, err = Fetch(ctx, g, f.path); err != nil {
			return err
		}
	}
	return nil
}
