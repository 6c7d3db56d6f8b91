package latency

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/bench/kstacks"
	"github.com/update-agent/update-agent/tests/guest"
)

// recGuest records what the bench asks of the guest and answers every
// command with out.
type recGuest struct {
	Guest
	out    string
	cmds   []string
	copied []string // remote paths
}

func (g *recGuest) Run(_ context.Context, cmd string) (string, string, int, error) {
	g.cmds = append(g.cmds, cmd)
	return g.out, "", 0, nil
}

func (g *recGuest) CopyIn(_ context.Context, _, remote string) error {
	g.copied = append(g.copied, remote)
	return nil
}

func (g *recGuest) SetDiskThrottle(context.Context, guest.Disk, int64, int64) error { return nil }

func (g *recGuest) ran(sub string) bool {
	return slices.ContainsFunc(g.cmds, func(c string) bool { return strings.Contains(c, sub) })
}

// TestKStacksWiring: the sampler's command line parses as the sampler
// parses it, and names what the bench installs and starts: its binary
// where Install puts it, the disk the layout measures, the units of
// etcd (Install) and of the fio job (StartLoads) in system.slice.
func TestKStacksWiring(t *testing.T) {
	for _, pkg := range programs {
		if _, err := os.Stat(filepath.Join("../../..", pkg)); err != nil {
			t.Errorf("Build's package %s: %v", pkg, err)
		}
	}
	for _, l := range []Layout{Plain, Ostree} {
		args := l.kstacksArgs("/r/x")
		if args[0] != "/usr/local/bin/kstacks" {
			t.Errorf("sampler at %s", args[0])
		}
		c, err := kstacks.ParseFlags(args[1:], io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if c.Disk != l.Dev || c.Out != "/r/x/kstacks.json" || c.Interval != 100*time.Millisecond {
			t.Errorf("%s guest: config %+v", l.Dev, c)
		}
		cgroups := map[string]string{}
		for _, tg := range c.Targets {
			if tg.Cgroup != "" {
				cgroups[tg.Name] = tg.Cgroup
			}
		}
		if cgroups["etcd"] != "system.slice/bench-etcd.service" || cgroups["fio"] != "system.slice/bench-fio.service" ||
			cgroups["rpm-ostreed"] != "system.slice/rpm-ostreed.service" {
			t.Errorf("cgroups %v", cgroups)
		}
		comms := map[string]string{}
		for _, tg := range c.Targets {
			if tg.Comm != "" {
				comms[tg.Name] = tg.Comm
			}
		}
		// A kworker's comm names its work ("kworker/u4:2-flush-254:0"):
		// the glob's * must take it, and the agent's comm is its name.
		if ok, _ := path.Match(comms["kworker"], "kworker/u4:2-flush-254:0"); !ok || comms["update-agent"] != "update-agent" {
			t.Errorf("comm targets %v", comms)
		}

		g := &recGuest{out: "1796216154431000000\n"}
		bins := Binaries{Dir: "/bin"}
		if err := Install(context.Background(), g, l, bins, "/repo"); err != nil {
			t.Fatal(err)
		}
		for name := range programs {
			if !slices.Contains(g.copied, binDir+"/"+name) {
				t.Errorf("Install does not copy %s into the guest (copied %v)", name, g.copied)
			}
		}
		if !slices.ContainsFunc(g.cmds, func(c string) bool {
			return strings.Contains(c, "install -m 0755 ") && strings.Contains(c, " "+binDir+"/kstacks ") && strings.Contains(c, " /usr/local/bin/")
		}) {
			t.Errorf("Install does not put kstacks in /usr/local/bin: %q", g.cmds)
		}
		if !g.ran("/etc/systemd/system/" + etcdUnit) {
			t.Errorf("Install writes no %s: %q", etcdUnit, g.cmds)
		}
		if !slices.Contains(g.copied, "/etc/systemd/system/"+rpmOstreedUnit) {
			t.Errorf("Install copies no %s: %v", rpmOstreedUnit, g.copied)
		}
		if _, err := StartLoads(context.Background(), g, "/r/x", "/f", []string{"--name=x"}, 20); err != nil {
			t.Fatal(err)
		}
		if !g.ran("systemd-run -q --unit="+strings.TrimSuffix(fioUnit, ".service")+" ") || g.ran("--slice") || g.ran("Slice=") {
			t.Errorf("StartLoads does not run fio as %s in system.slice: %q", fioUnit, g.cmds)
		}
	}
}

// TestKStacksStartStop: the unit's command runs exactly the sampler's
// arguments, after removing a stale summary; stopping waits for the unit.
func TestKStacksStartStop(t *testing.T) {
	g := &recGuest{}
	if err := StartKStacks(context.Background(), g, Ostree, "/r/x"); err != nil {
		t.Fatal(err)
	}
	cmd := g.cmds[0]
	pre, argv, ok := strings.Cut(cmd, "systemd-run -q --unit=bench-kstacks.service --collect -p Nice=19 -E GOMAXPROCS=1 -- ")
	if !ok || !strings.Contains(pre, "rm -f '/r/x/kstacks.json'") || !strings.Contains(pre, "echo 1 > "+debugStats) {
		t.Fatalf("start command %q", cmd)
	}
	var words []string
	for _, w := range strings.Fields(argv) {
		words = append(words, strings.Trim(w, "'"))
	}
	if want := Ostree.kstacksArgs("/r/x"); !slices.Equal(words, want) {
		t.Errorf("sampler run as %q, want %q", words, want)
	}
	if err := StopKStacks(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.cmds[1], "systemctl stop bench-kstacks.service") || !strings.Contains(g.cmds[1], "is-active bench-kstacks.service") {
		t.Errorf("stop command %q", g.cmds[1])
	}
}

// sampled runs the real sampler, configured by the bench's own command
// line, over a guest's files where etcd has one thread in D and the fio
// job's unit has the threads listed in fioThreads.
func sampled(t *testing.T, l Layout, fioThreads string) []byte {
	t.Helper()
	c, err := kstacks.ParseFlags(l.kstacksArgs("/r/x")[1:], io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for p, body := range map[string]string{
		"sys/fs/cgroup/system.slice/" + etcdUnit + "/cgroup.threads": "100\n",
		"sys/fs/cgroup/system.slice/" + fioUnit + "/cgroup.threads":  fioThreads,
		"proc/100/task/100/stat":                                     "100 (etcd) D 1 100 100 0 -1 4194560 10 0 0 0 25 17 0 0 20 0 11 0 100\n",
		"proc/100/task/100/stack":                                    "[<0>] xlog_wait_on_iclog+0x15e/0x180 [xfs]\n[<0>] xfs_file_fsync+0x14e/0x220 [xfs]\n",
		"proc/200/task/200/stat":                                     "200 (fio) S 1 200 200 0 -1 4194560 10 0 0 0 3 1 0 0 20 0 3 0 100\n",
		"sys/block/" + l.Dev + "/inflight":                           "0 7\n",
	} {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := kstacks.NewSampler(root, c)
	defer s.Close()
	s.Rescan()
	s.Sample()
	b, err := json.Marshal(s.Summary())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFetchKStacks: the summary of the sampler run as the bench runs it
// comes back as text; none, or one without a thread of fio's unit, fails
// the scenario.
func TestFetchKStacks(t *testing.T) {
	g := filesGuest{files: map[string][]byte{"/r/x/kstacks.json": sampled(t, Ostree, "200\n")}}
	txt, err := FetchKStacks(context.Background(), g, "/r/x")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"etcd: 1 threads; 1 of 1 samples (100.0%) with a thread in D",
		"xfs_file_fsync;xlog_wait_on_iclog",
		"fio: 1 threads; 0 of 1 samples",
		"vda: requests in flight",
	} {
		if !bytes.Contains(txt, []byte(want)) {
			t.Errorf("no %q in\n%s", want, txt)
		}
	}
	if _, err := FetchKStacks(context.Background(), filesGuest{}, "/r/x"); err == nil {
		t.Error("no summary: no error")
	}
	g = filesGuest{files: map[string][]byte{"/r/x/kstacks.json": sampled(t, Ostree, "")}}
	if _, err := FetchKStacks(context.Background(), g, "/r/x"); err == nil || !strings.Contains(err.Error(), "fio") {
		t.Errorf("no fio thread sampled: %v", err)
	}
}

func TestLogBase(t *testing.T) {
	d := On("xfs", Disks[1])
	sc := Scenario{ID: "b-naive", Stager: Naive, FioUnlimited: true}
	if got, want := LogBase(d, sc, 2), "xfs-500iops-20MBs-b-naive-fio-unlimited-rep2"; got != want {
		t.Errorf("LogBase %q, want %q", got, want)
	}
}
