package fio

import (
	"os"
	"strings"
	"testing"
	"time"
)

func open(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestParseJSONRateLimited(t *testing.T) {
	rep, err := ParseJSON(open(t, "rate100.json"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := rep.Job("etcdlike")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Version != "fio-3.33" || j.WriteIOs != 400 || j.Sync.N != 400 {
		t.Fatalf("version %q writes %d syncs %d", rep.Version, j.WriteIOs, j.Sync.N)
	}
	if j.Sync.Max != 106817404 || j.Sync.Min != 99248 {
		t.Fatalf("sync min/max = %v/%v", j.Sync.Min, j.Sync.Max)
	}
	for p, want := range map[float64]time.Duration{50: 395264, 99: 1236992, 99.9: 106430464} {
		got, err := j.Sync.Percentile(p)
		if err != nil || got != want {
			t.Errorf("sync p%g = %v, %v; want %v", p, got, err, time.Duration(want))
		}
	}
	if got, _ := j.Write.Percentile(50); got != 37120 {
		t.Errorf("write clat p50 = %v", got)
	}
	if j.Runtime != 4001*time.Millisecond {
		t.Errorf("runtime %v", j.Runtime)
	}
}

func TestParseJSONSkipsWarningsAndReportsMissingPercentile(t *testing.T) {
	rep, err := ParseJSON(open(t, "unlimited_with_warning.json"))
	if err != nil {
		t.Fatal(err)
	}
	j := rep.Jobs[0]
	if got, _ := j.Sync.Percentile(99.99); got != 30539776 {
		t.Errorf("p99.99 = %v", got)
	}
	if _, err := j.Sync.Percentile(99.5); err == nil || !strings.Contains(err.Error(), "99.5") {
		t.Errorf("missing percentile: err = %v", err)
	}
	if _, err := rep.Job("nope"); err == nil {
		t.Error("unknown job: no error")
	}
}

func TestParseJSONErrors(t *testing.T) {
	for _, in := range []string{"", "fio: engine failed", `{"jobs": []}`, `{"jobs": [{"jobname":"x","sync":{"lat_ns":{"percentile":{"abc":1}}}}]}`} {
		if _, err := ParseJSON(strings.NewReader(in)); err == nil {
			t.Errorf("ParseJSON(%q): no error", in)
		}
	}
}

func TestParseLatLog(t *testing.T) {
	s, err := ParseLatLog(open(t, "rate100_lat.1.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 400 {
		t.Fatalf("%d samples", len(s))
	}
	if s[1] != (Sample{At: 10 * time.Millisecond, Lat: 90384, Dir: DirWrite, BS: 2300}) {
		t.Fatalf("sample 1 = %+v", s[1])
	}
	if _, err := ParseLatLog(strings.NewReader("1, 2\n")); err == nil {
		t.Error("short line: no error")
	}
	if _, err := ParseLatLog(strings.NewReader("1, x, 1, 2300\n")); err == nil {
		t.Error("bad number: no error")
	}
}

func TestSyncStalls(t *testing.T) {
	// Writes every 10 ms; the fdatasync after the second write stalls 200 ms.
	ms := time.Millisecond
	in := []Sample{
		{At: 0, Lat: 30000, Dir: DirWrite},
		{At: 10 * ms, Lat: 30000, Dir: DirWrite},
		{At: 1 * ms, Lat: 5000, Dir: DirRead}, // other directions are ignored
		{At: 210 * ms, Lat: 1 * ms, Dir: DirWrite},
		{At: 215 * ms, Lat: 0, Dir: DirWrite},
	}
	got := SyncStalls(in)
	want := []Stall{{0, 10*ms - 30000}, {10 * ms, 199 * ms}, {210 * ms, 5 * ms}}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("stall %d = %v, want %v", i, got[i], want[i])
		}
	}
	// On the recorded run the report's slowest fdatasync (106.8 ms) must show
	// up as the largest gap, give or take the log's 1 ms resolution.
	s, _ := ParseLatLog(open(t, "rate100_lat.1.log"))
	rep, _ := ParseJSON(open(t, "rate100.json"))
	var maxGap time.Duration
	for _, st := range SyncStalls(s) {
		maxGap = max(maxGap, st.Gap)
	}
	if syncMax := rep.Jobs[0].Sync.Max; maxGap < syncMax-ms || maxGap > syncMax+2*ms {
		t.Errorf("largest gap %v, slowest fdatasync %v", maxGap, syncMax)
	}
}

func TestWALJobArgs(t *testing.T) {
	a := strings.Join(WALJob{Name: "wal", Dir: "/d", Runtime: 90 * time.Second, RateIOPS: 150, LatLog: "/r/wal"}.Args(), " ")
	for _, w := range []string{"--fdatasync=1", "--bs=2300", "--rate_iops=150", "--runtime=90s", "--write_lat_log=/r/wal", "--log_avg_msec=0", "--output-format=json"} {
		if !strings.Contains(a, w) {
			t.Errorf("args %q lack %q", a, w)
		}
	}
	if u := strings.Join(WALJob{Name: "wal", Dir: "/d", Runtime: time.Minute}.Args(), " "); strings.Contains(u, "rate_iops") || strings.Contains(u, "lat_log") {
		t.Errorf("unlimited job args %q", u)
	}
}
