package latency

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

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
		EtcdLine: read(t, "timeline.csv"),
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
}

func TestRowsRefuseMissingPieces(t *testing.T) {
	for name, spoil := range map[string]func(*Measured){
		"no fio report":       func(m *Measured) { m.FioJSON = nil },
		"no etcd scrape":      func(m *Measured) { m.EtcdPost = []byte("# nothing\n") },
		"etcd restarted":      func(m *Measured) { m.EtcdPre, m.EtcdPost = m.EtcdPost, m.EtcdPre },
		"no fsync in between": func(m *Measured) { m.EtcdPost = m.EtcdPre },
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
	full, quick := MakePlan(false), MakePlan(true)
	if len(full.Disks) != 2 || full.UpdateSize != "1200MiB" {
		t.Errorf("full plan %+v", full)
	}
	for _, d := range full.Disks {
		ids := map[string]bool{}
		for _, s := range full.Scenarios[d.Name] {
			ids[s.ID+s.Load(d)] = true
		}
		for _, want := range []string{report.ScenarioAlone, report.ScenarioNaive, "c-openshift2020", report.ScenarioAgent, "e-agent-noguard"} {
			if !ids[want+fmt.Sprintf("fio-%d/s", d.FioRate)] {
				t.Errorf("%s lacks %s", d.Name, want)
			}
		}
	}
	if n := len(full.Scenarios[Disks[1].Name]); n != 5+len(Knobs)+6 {
		t.Errorf("small disk: %d scenarios", n)
	}
	if len(quick.Disks) != 1 || len(quick.Scenarios[quick.Disks[0].Name]) != 4 || quick.UpdateSize == full.UpdateSize {
		t.Errorf("quick plan %+v", quick)
	}
	// Each knob is valid TOML on its own, one section per fragment.
	for _, k := range Knobs {
		if strings.Count(k.Config, "[") != 1 {
			t.Errorf("knob %s: %q", k.ID, k.Config)
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
