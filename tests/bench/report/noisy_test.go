package report

import (
	"bytes"
	"strings"
	"testing"
)

// The case: one alone repetition at 66 ms among ~15 ms ones. It is
// flagged, and the rows of its repetition are compared with the other
// alone repetitions' medians instead of with it.
func TestNoisyAlone(t *testing.T) {
	tb := repTable()
	if n := tb.NoisyAlone(); len(n) != 0 {
		t.Fatalf("10/20/15 ms flagged %v: within 1.5x of the median", n)
	}
	tb.Rows[3].P99 = 66 * ms // rep 2's alone
	tb.Rows[3].Max = 512 * ms
	n := tb.NoisyAlone()
	if len(n) != 1 || n[0].Rep != 2 || n[0].Median != 15*ms {
		t.Fatalf("NoisyAlone = %v, want rep 2 against the median 15ms", n)
	}
	// rep 2's agent p99 40 ms against the others' alone median 12.5 ms
	// (10 and 15), not against 66 ms; its max against 64 ms.
	q := tb.Ratios(tb.Rows[5])
	if q.P99VsAlone != 40.0/12.5 || q.MaxVsAlone != 2 {
		t.Errorf("rep 2 ratios %+v, want p99 x3.2 and max x2 against the other repetitions", q)
	}
	// Other repetitions keep their own.
	if q := tb.Ratios(tb.Rows[2]); q.P99VsAlone != 1.2 {
		t.Errorf("rep 1 p99/a %v, want 1.2", q.P99VsAlone)
	}
	var b bytes.Buffer
	if err := tb.WriteSummary(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "noisy alone repetition") || !strings.Contains(b.String(), "rep 2: p99 66ms against the alone median 15ms") {
		t.Errorf("summary does not flag rep 2:\n%s", b.String())
	}
	// Measured again: the old rows go.
	again := tb.Without("500iops", ScenarioAlone, 2)
	if _, ok := again.find("500iops", "etcd", ScenarioAlone, 2); ok || len(again.Rows) != len(tb.Rows)-1 {
		t.Errorf("Without left %d rows", len(again.Rows))
	}
	// Fewer than 3: no telling which one is off.
	two := Table{Rows: []Row{{Disk: "d", Load: "etcd", Scenario: ScenarioAlone, Rep: 1, P99: 10 * ms}, {Disk: "d", Load: "etcd", Scenario: ScenarioAlone, Rep: 2, P99: 60 * ms}}}
	if n := two.NoisyAlone(); len(n) != 0 {
		t.Errorf("two repetitions flagged %v", n)
	}
}
