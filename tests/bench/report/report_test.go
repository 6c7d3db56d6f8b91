package report

import (
	"bytes"
	"encoding/csv"
	"image/png"
	"math"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// Figures from the first measurements on the 500-IOPS disk (staging-latency.md).
func sampleTable() Table {
	return Table{Rows: []Row{
		{Disk: "500iops", Load: "fio", Scenario: ScenarioAlone, N: 15261, P50: 2638 * time.Microsecond, P99: 10682 * time.Microsecond, P999: 17957 * time.Microsecond, Max: 29382 * time.Microsecond},
		{Disk: "500iops", Load: "fio", Scenario: ScenarioNaive, Staging: 80600 * ms, N: 2544, P50: 5145 * time.Microsecond, P99: 308281 * time.Microsecond, P999: 4529848 * time.Microsecond, Max: 4755820 * time.Microsecond},
		{Disk: "500iops", Load: "fio", Scenario: ScenarioAgent, Staging: 84700 * ms, N: 2869, Rate: 33.87, P50: 5079 * time.Microsecond, P99: 13 * ms, P999: 50 * ms, Max: 90 * ms},
		{Disk: "500iops", Load: "etcd", Scenario: ScenarioAgent, Staging: 200 * time.Second, N: 900, P50: 2 * ms, P99: 64 * ms, P999: 128 * ms, Max: 256 * ms, MaxIsBound: true},
	}}
}

func TestRatios(t *testing.T) {
	tb := sampleTable()
	q := tb.Ratios(tb.Rows[2])
	near := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-3 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("p99/a", q.P99VsAlone, 13.0/10.682)
	near("max/a", q.MaxVsAlone, 90/29.382)
	near("p99/b", q.P99VsNaive, 13/308.281)
	near("staging/b", q.StageVsNaive, 84.7/80.6)
	// No baseline under the etcd load: ratios are unknown, not 0 or 1.
	q = tb.Ratios(tb.Rows[3])
	if !math.IsNaN(q.P99VsAlone) || !math.IsNaN(q.StageVsNaive) {
		t.Errorf("etcd row ratios without baselines: %+v", q)
	}
	// (a) has no staging time: its staging ratio is unknown.
	if q := tb.Ratios(tb.Rows[0]); !math.IsNaN(q.StageVsNaive) || q.P99VsAlone != 1 {
		t.Errorf("alone row ratios %+v", q)
	}
}

func TestTargets(t *testing.T) {
	got := map[string]bool{}
	for _, c := range sampleTable().Targets() {
		got[c.Row.Load+" "+c.What] = c.Met
	}
	want := map[string]bool{
		"fio p99 <= 1.3x alone": true, "fio max <= 100ms": true, "fio staging <= 2x naive": true,
		// Missing baselines never count as met.
		"etcd p99 <= 1.3x alone": false, "etcd max <= 100ms": false, "etcd staging <= 2x naive": false,
	}
	if len(got) != len(want) {
		t.Fatalf("targets %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s met = %v, want %v", k, got[k], v)
		}
	}
}

func TestWriteTextAndCSV(t *testing.T) {
	tb := sampleTable()
	var txt bytes.Buffer
	if err := tb.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"p99/a", "308.28", "<=256.00", "80.6", "target 500iops/fio max <= 100ms: met (90.00ms)", "MISSED"} {
		if !strings.Contains(txt.String(), w) {
			t.Errorf("text lacks %q:\n%s", w, txt.String())
		}
	}
	var c bytes.Buffer
	if err := tb.WriteCSV(&c); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&c).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 || len(recs[0]) != len(header) || recs[0][5] != "per_s" {
		t.Fatalf("csv %d records, %d columns", len(recs), len(recs[0]))
	}
	if r := recs[3]; r[2] != ScenarioAgent || r[5] != "33.9" || r[7] != "13.00" || r[10] != "1.22" || r[13] != "1.05" {
		t.Errorf("agent row %v", r)
	}
}

func TestWritePNG(t *testing.T) {
	var pts []Point
	for i := 0; i < 600; i++ {
		lat := 2 * ms
		if i >= 200 && i < 400 {
			lat = 300 * ms
		}
		pts = append(pts, Point{At: time.Duration(i) * 100 * ms, Lat: lat})
	}
	var b bytes.Buffer
	err := WritePNG(&b, []Panel{
		{Title: "b-naive 500iops", Series: []Series{{"fio", Blue, pts}, {"etcd", Orange, pts[:1]}}, StageStart: 20 * time.Second, StageEnd: 40 * time.Second, ThresholdLine: 100 * ms},
		{Title: "a-alone", Series: []Series{{"fio", Blue, pts[:100]}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != panelW || img.Bounds().Dy() != 2*panelH {
		t.Fatalf("size %v", img.Bounds())
	}
	// Inside the staging window, away from the dots: shaded. Outside: white.
	x := marginL + (panelW-marginL-marginR)*30/60
	if r, g, bl, _ := img.At(x, yPos(0, 3*ms+ms/2)).RGBA(); r>>8 != 255 || g>>8 != 228 || bl>>8 != 181 {
		t.Errorf("staging window not shaded at x=%d: %d %d %d", x, r>>8, g>>8, bl>>8)
	}
	x = marginL + (panelW-marginL-marginR)*50/60
	if r, g, bl, _ := img.At(x, yPos(0, 3*ms+ms/2)).RGBA(); r>>8 != 255 || g>>8 != 255 || bl>>8 != 255 {
		t.Errorf("outside the window not white: %d %d %d", r>>8, g>>8, bl>>8)
	}
	// The stall is drawn at 300 ms, inside the window.
	x = marginL + (panelW-marginL-marginR)*30/60
	if c := img.At(x, yPos(0, 300*ms)); c != Blue {
		t.Errorf("no dot at the stall: %v", c)
	}
	if err := WritePNG(&b, nil); err == nil {
		t.Error("no panels: no error")
	}
}

func TestYPosIsLogAndClamped(t *testing.T) {
	a, b, c := yPos(0, time.Millisecond), yPos(0, 10*time.Millisecond), yPos(0, 100*time.Millisecond)
	if d := (a - b) - (b - c); d < -1 || d > 1 || a <= b {
		t.Errorf("decades at %d %d %d", a, b, c)
	}
	if yPos(0, time.Nanosecond) != yPos(0, yMin) || yPos(0, time.Hour) != yPos(0, yMax) {
		t.Error("not clamped")
	}
}
