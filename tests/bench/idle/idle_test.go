package idle

import (
	"os"
	"strings"
	"testing"
	"time"
)

const status = `Name:	update-agent
Umask:	0022
State:	S (sleeping)
VmPeak:	 1262176 kB
VmHWM:	   21340 kB
VmRSS:	   19480 kB
RssAnon:	    6528 kB
Threads:	9
`

func TestParseStatus(t *testing.T) {
	rss, hwm, err := ParseStatus(status)
	if err != nil || rss != 19480<<10 || hwm != 21340<<10 {
		t.Errorf("ParseStatus = %d, %d, %v", rss, hwm, err)
	}
	// A kernel thread has neither line.
	if _, _, err := ParseStatus("Name:\tkthreadd\nState:\tS\n"); err == nil {
		t.Error("no error without VmRSS")
	}
	if _, _, err := ParseStatus("VmRSS:\t12 MB\nVmHWM:\t1 kB\n"); err == nil {
		t.Error("no error for a unit other than kB")
	}
}

func TestParseStat(t *testing.T) {
	// comm with a space and a ')' inside; utime 150, stime 50, cutime 7, cstime 3.
	stat := "4242 (upd ate) x) S 1 4242 4242 0 -1 4194560 1200 34 0 0 150 50 7 3 20 0 9 0 12345 1262176000 4870 18446744073709551615"
	self, kids, err := ParseStat(stat)
	if err != nil || self != 2*time.Second || kids != 100*time.Millisecond {
		t.Errorf("ParseStat = %v, %v, %v", self, kids, err)
	}
	if _, _, err := ParseStat("4242 (short) S 1 2"); err == nil {
		t.Error("no error for a truncated stat")
	}
}

// ReadProc on this process: the figures are there and plausible.
func TestReadProcSelf(t *testing.T) {
	s, err := ReadProc("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.RSS == 0 || s.HWM < s.RSS {
		t.Errorf("RSS %d, HWM %d", s.RSS, s.HWM)
	}
}

func TestCountLog(t *testing.T) {
	log := `time=T level=WARN msg=configuration warning="x"
time=T level=INFO msg="starting operation" node=n op="reading rpm-ostree status" argv="[/b/rpm-ostree status --json]"
time=T level=INFO msg="operation done" node=n op="reading rpm-ostree status" argv="[/b/rpm-ostree status --json]" duration=6ms
time=T level=INFO msg="starting operation" node=n op="checking for updates" argv="[/b/rpm-ostree upgrade --check]"
time=T level=INFO msg="starting operation" node=n op=hook argv="[/usr/bin/true]"
time=T level=INFO msg="starting operation" node=n op="reading rpm-ostree status" argv="[/b/rpm-ostree status --json]"
time=T level=ERROR msg="metrics endpoint stopped" err=x
`
	runs, warns := CountLog(log, "/b/rpm-ostree")
	if runs["status"] != 2 || runs["upgrade"] != 1 || len(runs) != 2 || warns != 2 {
		t.Errorf("CountLog = %v, %d warnings", runs, warns)
	}
}

func TestSummarize(t *testing.T) {
	t0 := time.Unix(1000, 0)
	mk := func(sec int, rss uint64, cpu time.Duration) Sample {
		return Sample{At: t0.Add(time.Duration(sec) * time.Second), RSS: rss << 20, HWM: 30 << 20, CPU: cpu, Children: cpu / 2}
	}
	s := Summarize([]Sample{mk(0, 20, time.Second), mk(100, 24, 1100*time.Millisecond), mk(200, 21, 1200*time.Millisecond), mk(300, 22, 1300*time.Millisecond)})
	if s.RSSStart != 20<<20 || s.RSSMax != 24<<20 || s.RSSMedian != (21<<20+22<<20)/2 || s.HWMEnd != 30<<20 {
		t.Errorf("RSS figures: %+v", s)
	}
	if s.Span != 300*time.Second || s.CPUIdle != 300*time.Millisecond || s.CPUTotal != 1300*time.Millisecond {
		t.Errorf("CPU figures: %+v", s)
	}
	if p := s.CorePercent(); p < 0.0999 || p > 0.1001 {
		t.Errorf("CorePercent = %v, want 0.1", p)
	}
	md := Markdown(s, Counts{Scrapes: 5, ScrapeBytes: 5 * 12 << 10, RPMOstree: map[string]int{"status": 3}}, "setup")
	for _, want := range []string{"| RSS median | 21.5 MB | < 25 MB (met) |", "| 0.100 % | <= 0.2 % (met) |", "5 (1.00 a minute, 12 KB", "3 (status 3)"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	var b strings.Builder
	if err := WriteCSV(&b, []Sample{mk(0, 20, time.Second), mk(5, 21, time.Second)}); err != nil {
		t.Fatal(err)
	}
	if want := "t_s,rss_bytes,hwm_bytes,cpu_s,children_cpu_s\n0.0,20971520,31457280,1.00,0.50\n5.0,22020096,31457280,1.00,0.50\n"; b.String() != want {
		t.Errorf("CSV:\n%s\nwant:\n%s", b.String(), want)
	}
}
