package promhist

import (
	"math"
	"os"
	"strings"
	"testing"
)

const walFsync = "etcd_disk_wal_fsync_duration_seconds"

// testdata holds two scrapes of a real etcd 3.7 member, 200 puts apart.
func scrape(t *testing.T, name string) Histogram {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := Parse(f, walFsync)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestParseRealScrape(t *testing.T) {
	h := scrape(t, "after.txt")
	if len(h.Buckets) != 15 || h.Count != 256 || h.Total() != 256 {
		t.Fatalf("buckets %d count %v total %v", len(h.Buckets), h.Count, h.Total())
	}
	if h.Buckets[0] != (Bucket{0.001, 228}) || !math.IsInf(h.Buckets[14].Le, 1) {
		t.Fatalf("buckets %v", h.Buckets)
	}
	if math.Abs(h.Sum-0.207823592) > 1e-12 {
		t.Errorf("sum %v", h.Sum)
	}
}

func TestSubAndQuantile(t *testing.T) {
	d, err := scrape(t, "after.txt").Sub(scrape(t, "before.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Between the scrapes (cumulative): 178 <= 1 ms, 187 <= 2 ms, 196 <= 4 ms, 200 <= 8 ms.
	if d.Total() != 200 || d.Count != 200 {
		t.Fatalf("delta total %v", d.Total())
	}
	near := func(q, want float64) {
		t.Helper()
		if got := d.Quantile(q); math.Abs(got-want) > 1e-12 {
			t.Errorf("q%v = %v, want %v", q, got, want)
		}
	}
	near(0.5, 0.001*100/178)            // inside the first bucket, from 0
	near(0.95, 0.002+0.002*(190-187)/9) // rank 190 in (2,4] ms
	near(0.99, 0.006)                   // rank 198 in (4,8] ms
	if got := d.MaxBound(); got != 0.008 {
		t.Errorf("max bound %v", got)
	}
	if !math.IsNaN((Histogram{}).Quantile(0.5)) {
		t.Error("empty histogram has a quantile")
	}
}

func TestQuantileInInfBucket(t *testing.T) {
	h := Histogram{Buckets: []Bucket{{0.5, 1}, {1, 1}, {math.Inf(1), 10}}}
	if got := h.Quantile(0.99); got != 1 {
		t.Errorf("q99 in +Inf bucket = %v, want the largest finite bound 1", got)
	}
	if !math.IsInf(h.MaxBound(), 1) {
		t.Errorf("max bound %v", h.MaxBound())
	}
}

func TestParseLabelsSummedAndErrors(t *testing.T) {
	in := `# TYPE x histogram
x_bucket{a="1",le="0.1"} 1
x_bucket{a="1",le="+Inf"} 2
x_bucket{a="2",le="0.1"} 3
x_bucket{a="2",le="+Inf"} 3
x_sum{a="1"} 0.5
x_count{a="1"} 2
x_count{a="2"} 3
xy_bucket{le="+Inf"} 100
`
	h, err := Parse(strings.NewReader(in), "x")
	if err != nil {
		t.Fatal(err)
	}
	if h.Total() != 5 || h.Buckets[0].Count != 4 || h.Count != 5 {
		t.Errorf("summed %+v", h)
	}
	for _, bad := range []string{"", "x_bucket 1\n", `x_bucket{le="0.1"} 1` + "\n", `x_bucket{le="abc"} 1` + "\n", `x_bucket{le="+Inf"} z` + "\n"} {
		if _, err := Parse(strings.NewReader(bad), "x"); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
	a := Histogram{Buckets: []Bucket{{1, 1}, {math.Inf(1), 2}}}
	if _, err := a.Sub(Histogram{Buckets: []Bucket{{1, 2}, {math.Inf(1), 3}}}); err == nil {
		t.Error("counter reset: no error")
	}
	if _, err := a.Sub(Histogram{Buckets: []Bucket{{math.Inf(1), 3}}}); err == nil {
		t.Error("different layout: no error")
	}
}
