package report

import (
	"bytes"
	"encoding/csv"
	"image/color"
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
		"fio p99 <= 1.3x alone": true, "fio max <= 250ms": true, "fio staging <= 3x naive": true,
		// Missing baselines never count as met; etcd's max is a bucket bound.
		"etcd p99 <= 1.3x alone": false, "etcd worst bucket <= 256ms": true, "etcd staging <= 3x naive": false,
	}
	if len(got) != len(want) {
		t.Fatalf("targets %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s met = %v, want %v", k, got[k], v)
		}
	}
	// Without a baseline (the demo has no naive staging) a target is not
	// measured, which is not the same as missed.
	for _, c := range sampleTable().Targets() {
		if c.Row.Load == "etcd" && c.What == "staging <= 3x naive" {
			if s := c.String(); !strings.Contains(s, "not measured") || strings.Contains(s, "MISSED") {
				t.Errorf("no naive staging: %q", s)
			}
		}
	}
}

// The p99 limit: the CPU-only line where the run measured one above 1.3x
// (and not where it is below), 2x on a scale-model disk.
func TestTargetsP99Limit(t *testing.T) {
	row := func(disk, scenario string, p99 time.Duration) Row {
		return Row{Disk: disk, Load: "etcd", Scenario: scenario, Rep: 1, N: 100, P99: p99, Max: 64 * ms, MaxIsBound: true}
	}
	tb := Table{Rows: []Row{
		row("cpu", ScenarioAlone, 10*ms), row("cpu", CPUOnlyScenario, 17*ms), row("cpu", ScenarioAgent, 16*ms),
		row("io", ScenarioAlone, 10*ms), row("io", CPUOnlyScenario, 11*ms), row("io", ScenarioAgent, 14*ms),
		row("slow", ScenarioAlone, 10*ms), row("slow", ScenarioAgent, 19*ms),
	}, ScaleModel: []string{"slow"}}
	got := map[string]string{}
	for _, c := range tb.Targets() {
		if strings.HasPrefix(c.What, "p99") {
			got[c.Row.Disk] = c.String()
		}
	}
	for disk, want := range map[string]string{
		"cpu":  "p99 <= the CPU-only line x1.70: met",
		"io":   "p99 <= 1.3x alone: MISSED",
		"slow": "p99 <= 2x alone (scale model): met",
	} {
		if !strings.Contains(got[disk], want) {
			t.Errorf("%s: %q, want %q", disk, got[disk], want)
		}
	}
}

// Three interleaved repetitions: each ratio against its own repetition's
// (a), the summary the median with min-max.
func repTable() Table {
	var tb Table
	alone := []time.Duration{10 * ms, 20 * ms, 15 * ms}
	agent := []time.Duration{12 * ms, 40 * ms, 15 * ms} // x1.2, x2.0, x1.0
	for i := range 3 {
		rep := i + 1
		tb.Rows = append(tb.Rows,
			Row{Disk: "500iops", Load: "etcd", Scenario: ScenarioAlone, Rep: rep, N: 1000, P99: alone[i], Max: 64 * ms, MaxIsBound: true, Rate: 20, Asked: 20,
				ScrapeP99s: []time.Duration{alone[i] / 2, alone[i], alone[i] / 2, alone[i] / 4}}, // worst of 2 in a row: p99, p99, p99/2
			Row{Disk: "500iops", Load: "etcd", Scenario: ScenarioNaive, Rep: rep, N: 1000, P99: 100 * ms, Max: 1024 * ms, MaxIsBound: true, Staging: 100 * time.Second, Rate: 17, Asked: 20},
			Row{Disk: "500iops", Load: "etcd", Scenario: ScenarioAgent, Rep: rep, N: 1000, P99: agent[i], Max: 128 * ms, MaxIsBound: true,
				Staging: time.Duration(150+10*i) * time.Second, Setup: 2 * time.Second, SetupP99: alone[i], SetupScrapes: 2, Rate: 19.9, Asked: 20, AgentCPU: 3 * time.Second})
	}
	return tb
}

func TestTypicalWorst(t *testing.T) {
	d := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*ms)
		}
		return out
	}
	for _, c := range []struct {
		p99s []time.Duration
		k    int
		want time.Duration
	}{
		{d(10, 30, 20), 1, 20 * ms},         // the median scrape
		{d(10, 30, 20, 5), 2, 30 * ms},      // worst of 2 in a row: 30, 30, 20
		{d(10, 40, 10, 10, 10), 2, 25 * ms}, // 40, 40, 10, 10: median of an even count
		{d(10, 20), 3, 0},                   // fewer scrapes than k
		{d(10, 20), 0, 0},
	} {
		if got := TypicalWorst(c.p99s, c.k); got != c.want {
			t.Errorf("TypicalWorst(%v, %d) = %v, want %v", c.p99s, c.k, got, c.want)
		}
	}
}

func TestSummaryMediansOverInterleavedReps(t *testing.T) {
	tb := repTable()
	// Each ratio against the same repetition's (a): rep 2's agent p99 40ms
	// against its own alone's 20ms.
	if q := tb.Ratios(tb.Rows[5]); q.P99VsAlone != 2 || q.SetupP99VsAlone != 1 {
		t.Errorf("rep 2 ratios %+v", q)
	}
	sum := tb.Summary()
	if len(sum) != 3 {
		t.Fatalf("summary rows %d, want 3", len(sum))
	}
	d := sum[2]
	near := func(name string, got Spread, med, lo, hi float64) {
		if math.Abs(got.Med-med) > 1e-9 || math.Abs(got.Min-lo) > 1e-9 || math.Abs(got.Max-hi) > 1e-9 {
			t.Errorf("%s = %+v, want %v [%v-%v]", name, got, med, lo, hi)
		}
	}
	near("p99/a", d.P99VsAlone, 1.2, 1, 2)
	near("staging/b", d.StageVsNaive, 1.6, 1.5, 1.7)
	near("achieved", d.Achieved, 0.995, 0.995, 0.995)
	near("cpu share", d.CPUShare, 3.0/160, 3.0/170, 3.0/150)
	var b bytes.Buffer
	if err := tb.WriteSummary(&b); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"1.20 [1.00-2.00]", "<=128.0", "target 500iops/etcd p99 <= 1.3x alone: met (median x1.20 [1.00-2.00])",
		"worst bucket <= 256ms: met", "staging <= 3x naive: met", "setup p99 <= 1.3x alone: met", "achieved >= 99% of asked: met", "agent CPU <= 3% of a core: met"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("summary lacks %q:\n%s", w, b.String())
		}
	}
	if s := spread([]float64{math.NaN()}); s.N != 0 || s.format(1) != "-" {
		t.Errorf("unknown spread %+v", s)
	}
}

func TestWriteTextAndCSV(t *testing.T) {
	tb := sampleTable()
	var txt bytes.Buffer
	if err := tb.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"p99/a", "308.28", "<=256.00", "80.6"} {
		if !strings.Contains(txt.String(), w) {
			t.Errorf("text lacks %q:\n%s", w, txt.String())
		}
	}
	var c bytes.Buffer
	if err := repTable().WriteCSV(&c); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&c).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	if len(recs) != 10 || len(recs[0]) != len(header) || col["rep"] != 3 {
		t.Fatalf("csv %d records, header %v", len(recs), recs[0])
	}
	if r := recs[6]; r[col["scenario"]] != ScenarioAgent || r[col["rep"]] != "2" || r[col["p99/a"]] != "2.00" ||
		r[col["setup_s"]] != "2.00" || r[col["setup_p99_ms"]] != "20.00" || r[col["agent_cpu_s"]] != "3.00" ||
		r[col["per_s"]] != "19.9" || r[col["asked_per_s"]] != "20" {
		t.Errorf("agent row of rep 2 %v", r)
	}
}

// countColor counts the pixels of exactly c.
func countColor(t *testing.T, b []byte, c color.RGBA) int {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)) == c {
				n++
			}
		}
	}
	return n
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
	staged := Panel{Title: "b-naive 500iops", Series: []Series{{"fio", Blue, pts}, {"etcd", Orange, pts[:1]}},
		SetupStart: 15 * time.Second, SetupEnd: 20 * time.Second, StageStart: 20 * time.Second, StageEnd: 40 * time.Second, ThresholdLine: 100 * ms}
	alone := Panel{Title: "a-alone", Series: []Series{{"fio", Blue, pts[:100]}, {"etcd", Orange, []Point{{At: time.Second, Lat: time.Hour}}}}}
	var b bytes.Buffer
	if err := WritePNG(&b, []Panel{staged, alone}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() < 800 || img.Bounds().Dy() < 2*200 {
		t.Fatalf("size %v", img.Bounds())
	}
	// Both phases shaded, the staging window four times the setup's width.
	stage, setup := countColor(t, b.Bytes(), StageShade), countColor(t, b.Bytes(), SetupShade)
	if stage == 0 || setup == 0 || stage < 2*setup {
		t.Errorf("shaded pixels: staging %d, setup %d", stage, setup)
	}
	var a bytes.Buffer
	if err := WritePNG(&a, []Panel{alone}); err != nil {
		t.Fatal(err)
	}
	if n := countColor(t, a.Bytes(), StageShade); n != 0 {
		t.Errorf("nothing staged, yet %d shaded pixels", n)
	}
	if err := WritePNG(&b, nil); err == nil {
		t.Error("no panels: no error")
	}
}

func TestCDF(t *testing.T) {
	xys := CDF([]time.Duration{4 * ms, ms, 2 * ms, 2 * ms, time.Hour})
	want := []struct{ x, y float64 }{{1, 0.2}, {2, 0.6}, {4, 0.8}, {10000, 1}} // clamped to 10 s
	if len(xys) != len(want) {
		t.Fatalf("cdf %v", xys)
	}
	for i, w := range want {
		if math.Abs(xys[i].X-w.x) > 1e-9 || math.Abs(xys[i].Y-w.y) > 1e-9 {
			t.Errorf("point %d = %v, want %v", i, xys[i], w)
		}
	}
	var b bytes.Buffer
	err := WriteCDF(&b, "500iops fio", []Curve{
		{Label: "a-alone", Lats: []time.Duration{ms, 2 * ms, 3 * ms}},
		{Label: "b-naive", Color: Red, Lats: []time.Duration{ms, 300 * ms, 4 * time.Second}},
		{Label: "d-agent etcd", Steps: []Step{{ms, 0.5}, {2 * ms, 0.9}, {4 * ms, 1}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if countColor(t, b.Bytes(), Red) == 0 {
		t.Error("the red curve is not drawn")
	}
	if err := WriteCDF(&b, "empty", []Curve{{Label: "x"}}); err == nil {
		t.Error("no points: no error")
	}
}
