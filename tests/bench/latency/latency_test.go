package latency

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/tests/bench/report"
)

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Recorded on this machine: fio at 100 IOPS for 4 s, and a real etcd member
// before/after 200 puts, with putload's timeline of another run.
func measured(t *testing.T) Measured {
	return Measured{
		Disk:     Disks[1],
		Scenario: Scenario{ID: report.ScenarioNaive, Stager: Naive},
		PutRate:  25,
		Window:   Window{Start: 1796216155000_000000, End: 1796216157000_000000},
		Loads:    Loads{StartNS: 1796216154431_000000},
		FioJSON:  read(t, "fio.json"), FioLat: read(t, "fio_lat.1.log"),
		EtcdPre: read(t, "etcd-before.txt"), EtcdPost: read(t, "etcd-after.txt"),
		EtcdLine: read(t, "timeline.csv"), EtcdPuts: read(t, "putload-summary.json"),
	}
}

func TestRows(t *testing.T) {
	rows, err := measured(t).Rows()
	if err != nil {
		t.Fatal(err)
	}
	f, e := rows[0], rows[1]
	if f.Load != "fio-80/s" || f.N != 400 || f.P99 != 1236992 || f.Max != 106817404 || f.Staging != 2*time.Second {
		t.Errorf("fio row %+v", f)
	}
	if e.Load != "etcd-25put/s" || e.N != 200 || !e.MaxIsBound || e.Max != 8*time.Millisecond || e.P99 != 6*time.Millisecond {
		t.Errorf("etcd row %+v", e)
	}
	// Puts served per second (196 in 8 s), not WAL fsyncs (N): etcd batches.
	if e.Rate != 24.5 {
		t.Errorf("etcd rate %v, want the 24.5 puts/s served", e.Rate)
	}
}

func TestRowsRefuseMissingPieces(t *testing.T) {
	for name, spoil := range map[string]func(*Measured){
		"no fio report":       func(m *Measured) { m.FioJSON = nil },
		"no etcd scrape":      func(m *Measured) { m.EtcdPost = []byte("# nothing\n") },
		"etcd restarted":      func(m *Measured) { m.EtcdPre, m.EtcdPost = m.EtcdPost, m.EtcdPre },
		"no fsync in between": func(m *Measured) { m.EtcdPost = m.EtcdPre },
		"no putload summary":  func(m *Measured) { m.EtcdPuts = nil },
		"summary not served":  func(m *Measured) { m.EtcdPuts = []byte(`{"offered":200,"seconds":8}`) },
	} {
		m := measured(t)
		spoil(&m)
		if _, err := m.Rows(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestPanel(t *testing.T) {
	p, err := measured(t).Panel()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Series) != 2 || len(p.Series[0].Points) != 399 || len(p.Series[1].Points) != 3 {
		t.Fatalf("series %d, points %d/%d", len(p.Series), len(p.Series[0].Points), len(p.Series[1].Points))
	}
	if p.StageStart != 569*time.Millisecond || p.StageEnd != 2569*time.Millisecond {
		t.Errorf("window %v-%v", p.StageStart, p.StageEnd)
	}
	if e := p.Series[1].Points[0]; e.At != time.Second || e.Lat != 32*time.Millisecond {
		t.Errorf("first etcd point %+v", e)
	}
}

func TestPlan(t *testing.T) {
	plan, quick, full := MakePlan(false), MakePlan(true), Sweep()
	var names []string
	for _, d := range plan.Disks {
		names = append(names, d.Name)
	}
	if want := "xfs-500iops-20MBs xfs-3000iops-125MBs ext4-500iops-20MBs ext4-3000iops-125MBs xfs-150iops-6MBs ext4-150iops-6MBs"; strings.Join(names, " ") != want || plan.UpdateSize != "600MiB" {
		t.Errorf("plan: disks %v, update %s; want %s, 600MiB", names, plan.UpdateSize, want)
	}
	for _, d := range plan.Disks {
		ids := map[string]bool{}
		for _, s := range plan.Scenarios[d.Name] {
			ids[s.ID+s.Load(d)] = true
		}
		// iocost (d-agent) beside the loop, and the CPU-only limit line,
		// on every disk.
		want := []string{report.ScenarioAlone, report.ScenarioNaive, report.ScenarioAgent, "i-iocost-learn", "x-cpuburn-idle"}
		if d.FS == "xfs" && d.IOPS != ScaleModel.IOPS {
			want = append(want, "c-openshift2020", "e-agent-noguard")
		}
		// A host's second window beside its first, where the defaults learn.
		if d.FS == "ext4" {
			want = append(want, AgentLearned.ID)
		}
		// Companion mode beside plain staging, on the small XFS disk.
		if d.Name == plan.Disks[0].Name {
			want = append(want, CompanionScenario.ID, CompanionMatureScenario.ID)
		}
		for _, w := range want {
			if !ids[w+fmt.Sprintf("fio-%d/s", d.FioRate)] {
				t.Errorf("%s lacks %s", d.Name, w)
			}
		}
		if len(ids) != len(want) {
			t.Errorf("%s: %d scenarios, want %d", d.Name, len(ids), len(want))
		}
	}
	// A window that starts from what another learned comes after it.
	for _, p := range []Plan{plan, full} {
		for _, d := range p.Disks {
			for i, s := range p.Scenarios[d.Name] {
				if s.LearnedFrom != "" && !slices.ContainsFunc(p.Scenarios[d.Name][:i], func(e Scenario) bool { return e.ID == s.LearnedFrom }) {
					t.Errorf("%s/%s starts from what %s learned, which does not run before it", d.Name, s.ID, s.LearnedFrom)
				}
			}
		}
	}
	if n := len(full.Scenarios[full.Disks[0].Name]); n != 9+len(Knobs)+len(AgentRuns)+len(Probes)-1+6+len(IOCostScenarios(Disk{}))+1 {
		t.Errorf("small disk: %d scenarios", n)
	}
	// iocost with the disk's model, without the guard, and bfq from boot
	// on every disk of the sweep (the fast disks lacked iocost's).
	for _, d := range full.Disks {
		for _, id := range []string{"i-iocost-model", "i-iocost-model-noguard", "i-iocost-model-mem256M", BFQAtBoot.ID} {
			if !slices.ContainsFunc(full.Scenarios[d.Name], func(s Scenario) bool { return s.ID == id }) {
				t.Errorf("sweep: %s lacks %s", d.Name, id)
			}
		}
	}
	var ext4 []string
	for _, s := range full.Scenarios["ext4-500iops-20MBs"] {
		ext4 = append(ext4, s.Key())
	}
	if want := "a-alone b-naive d-agent d-agent-learned i-iocost-learn x-cpuburn-idle i-iocost-model i-iocost-learn-etcd100 i-iocost-learn-maxsect-64 i-iocost-learn-mem8M i-iocost-learn-mem8M-etcd100 i-iocost-model-over4x i-iocost-model-under4x i-iocost-model-over4x-nobrake i-iocost-nobrake i-iocost-pct95 i-iocost-model-20ms i-iocost-model-noguard i-iocost-model-mem256M i-iocost-loose i-iocost-noguard i-iocost-stager-weight-100 i-iocost-stager-weight-10 k-bfq-boot e-agent-noguard k-cpuweight-100 k-bwmax-none k-bwmax-5M k-bwmax-4M k-objfsync k-memoryhigh-64M k-memoryhigh-16M k-memoryhigh-8M"; strings.Join(ext4, " ") != want {
		t.Errorf("small ext4 disk in the sweep: %v, want %s", ext4, want)
	}
	// Naming a scenario picks it, not the sweep's load variants of it.
	only := full.Only([]string{report.ScenarioAlone, report.ScenarioAgent + "+splitfs"})
	var got []string
	for _, d := range only.Disks {
		for _, s := range only.Scenarios[d.Name] {
			got = append(got, d.Name+"/"+s.Key())
		}
	}
	if want := "xfs-500iops-20MBs/a-alone xfs-500iops-20MBs/d-agent+splitfs xfs-3000iops-125MBs/a-alone ext4-500iops-20MBs/a-alone ext4-3000iops-125MBs/a-alone xfs-150iops-6MBs/a-alone ext4-150iops-6MBs/a-alone"; strings.Join(got, " ") != want {
		t.Errorf("Only: %v, want %s", got, want)
	}
	if len(quick.Disks) != 1 || len(quick.Scenarios[quick.Disks[0].Name]) != 4 || quick.UpdateSize == full.UpdateSize {
		t.Errorf("quick plan %+v", quick)
	}
	// Every agent scenario's configuration loads as the guest loads it: the
	// shipped defaults, the bench's base, then the scenario's fragment.
	defaults, err := os.ReadFile("../../../packaging/config.d/00-defaults.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []Layout{Plain, Ostree} {
		for _, d := range full.Disks {
			for _, s := range full.Scenarios[d.Name] {
				if s.Stager != Agent && s.Stager != Companion {
					continue
				}
				root := t.TempDir()
				files := map[string]string{
					"usr/lib/update-agent/config.d/00-defaults.toml": string(defaults),
					"etc/update-agent/config.d/50-bench.toml":        l.agentBase(),
					"etc/update-agent/config.d/60-scenario.toml":     s.AgentConfig,
				}
				if s.Stager == Companion {
					files["etc/update-agent/config.d/55-companion.toml"] = companionConfig
				}
				for name, body := range files {
					p := filepath.Join(root, name)
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				cfg, _, err := config.Load(root)
				if err != nil {
					t.Errorf("%s/%s: %v", d.Name, s.ID, err)
					continue
				}
				if got := strings.Join(cfg.Staging.Paths, " "); got != strings.Join(l.StagingPaths, " ") {
					t.Errorf("%s/%s: staging.paths %s, want %v", d.Name, s.ID, got, l.StagingPaths)
				}
				if s.Stager == Companion {
					// The daemon runs it: companion mode, and what the daemon
					// checks beyond the file (the lock beside etcd's unit).
					if !cfg.Staging.PaceForeign || cfg.Updates.Enabled {
						t.Errorf("%s/%s: pace_foreign %v, updates.enabled %v: not companion mode", d.Name, s.ID, cfg.Staging.PaceForeign, cfg.Updates.Enabled)
					}
					if err := cfg.CheckDaemon(); err != nil {
						t.Errorf("%s/%s: the daemon refuses it: %v", d.Name, s.ID, err)
					}
				}
			}
		}
	}
}

func TestMBR(t *testing.T) {
	const sectors = 8 << 30 >> 9
	b, err := MBR(sectors, 2)
	if err != nil {
		t.Fatal(err)
	}
	if b[510] != 0x55 || b[511] != 0xaa || b[446+4] != 0x83 || b[462+4] != 0x83 {
		t.Fatal("not a DOS table with two Linux partitions")
	}
	s1, n1 := binary.LittleEndian.Uint32(b[446+8:]), binary.LittleEndian.Uint32(b[446+12:])
	s2, n2 := binary.LittleEndian.Uint32(b[462+8:]), binary.LittleEndian.Uint32(b[462+12:])
	if s1 != 2048 || s2 != s1+n1 || uint64(s2)+uint64(n2) != sectors || s2%2048 != 0 {
		t.Errorf("partitions %d+%d, %d+%d", s1, n1, s2, n2)
	}
	if n2 < 2<<30>>9 {
		t.Errorf("second partition %d sectors", n2)
	}
	if _, err := MBR(1<<20, 2); err == nil {
		t.Error("too small a disk: no error")
	}
}

func TestSetupPhaseAndAgentCPU(t *testing.T) {
	// The timeline's scrapes are at ...155431, ...156430, ...157429 ms.
	log := `time=2026-12-02T12:55:50.000Z level=INFO msg="latency guard baseline" signal=wal_fsync p99_ms=4
time=2026-12-02T12:55:56.000Z level=INFO msg="staging setup started" disks=[vdb]
time=2026-12-02T12:55:56.200Z level=INFO msg="staging setup step" step=scheduler seconds=0.2 ok=true
time=2026-12-02T12:55:57.500Z level=INFO msg="staging setup done" setup_seconds=1.5 ok=true
`
	d, start, end, err := SetupPhase([]byte(log))
	if err != nil || d != 1500*time.Millisecond || end-start != int64(1500*time.Millisecond) {
		t.Fatalf("setup %v %v..%v %v", d, start, end, err)
	}
	m := measured(t)
	m.Scenario = Scenario{ID: report.ScenarioAgent, Stager: Agent}
	m.StageLog = []byte(log)
	m.Rep = 2
	m.Window.AgentCPU = 1234 * time.Millisecond
	rows, err := m.Rows()
	if err != nil {
		t.Fatal(err)
	}
	f, e := rows[0], rows[1]
	if f.Rep != 2 || e.Rep != 2 || f.Asked != 80 || e.Asked != 25 || e.Setup != 1500*time.Millisecond || e.AgentCPU != 1234*time.Millisecond {
		t.Errorf("rows %+v / %+v", f, e)
	}
	// The setup phase (…156.000 to …157.500) overlaps the scrapes ending
	// at …156430 and …157429: the worst p99 of the two.
	if (e.SetupP99-16320*time.Microsecond).Abs() > time.Microsecond || e.SetupScrapes != 2 {
		t.Errorf("setup p99 %v of %d scrapes", e.SetupP99, e.SetupScrapes)
	}
	// Every scrape's p99, for (a)'s typical worst of as many in a row.
	if len(e.ScrapeP99s) != 3 || (e.ScrapeP99s[2]-4*time.Millisecond).Abs() > time.Microsecond {
		t.Errorf("scrape p99s %v", e.ScrapeP99s)
	}
	if d, _, _, err := SetupPhase([]byte("no agent here\n")); err != nil || d != 0 {
		t.Errorf("no setup lines: %v %v", d, err)
	}
	if _, _, _, err := SetupPhase([]byte(`time=bad level=INFO msg="staging setup done" setup_seconds=1`)); err == nil {
		t.Error("bad time accepted")
	}

	for in, want := range map[string]time.Duration{
		"0m0.004s 0m0.000s\n0m1.500s 0m0.250s\n":             1750 * time.Millisecond,  // bash
		"0m0.004000s 0m0.000000s\n1m2.000000s 0m0.500000s\n": 62500 * time.Millisecond, // dash
	} {
		if got, err := ChildrenCPU(in); err != nil || got != want {
			t.Errorf("ChildrenCPU(%q) = %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0m0s 0m0s", "0m0s 0m0s\nx y\n"} {
		if _, err := ChildrenCPU(bad); err == nil {
			t.Errorf("ChildrenCPU(%q) accepted", bad)
		}
	}
}

// filesGuest serves `cat PATH` from files: what the loads left in the guest.
type filesGuest struct {
	Guest
	files map[string][]byte
}

func (g filesGuest) Run(_ context.Context, cmd string) (string, string, int, error) {
	for p, b := range g.files {
		if cmd == "cat "+q(p) {
			return string(b), "", 0, nil
		}
	}
	return "", "cat: no such file", 1, nil
}

// TestFetchLoadsGetsWhatRowsNeed: the bench and the demo fetch the loads'
// records through FetchLoads; a record Rows needs and FetchLoads does not
// fetch (the demo lacked putload's summary.json) fails here, not in a
// 20-minute demo.
func TestFetchLoadsGetsWhatRowsNeed(t *testing.T) {
	const dir = "/r/x"
	g := filesGuest{files: map[string][]byte{
		dir + "/fio.json": read(t, "fio.json"), dir + "/fio_lat.1.log": read(t, "fio_lat.1.log"),
		dir + "/etcd/before.txt": read(t, "etcd-before.txt"), dir + "/etcd/after.txt": read(t, "etcd-after.txt"),
		dir + "/etcd/timeline.csv": read(t, "timeline.csv"), dir + "/etcd/summary.json": read(t, "putload-summary.json"),
	}}
	want := measured(t)
	m := Measured{Disk: want.Disk, Scenario: want.Scenario, PutRate: want.PutRate, Window: want.Window, Loads: want.Loads}
	if err := FetchLoads(context.Background(), g, dir, &m); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Rows(); err != nil {
		t.Errorf("rows from the fetched records: %v", err)
	}
}
