package report

import (
	"fmt"
	"slices"
	"time"
)

// NoisyFactor is how far (either way) an alone repetition's p99 may sit
// from the median of its disk's and load's alone repetitions before it is
// taken for noise, not the load alone: under TCG one repetition's p99 has
// come out at 4x the others' (66 ms against 15), and every ratio of that
// repetition beside it was inflated by as much.
const NoisyFactor = 1.5

// NoisyRep is an alone repetition far from its median.
type NoisyRep struct {
	Disk, Load  string
	Rep         int
	P99, Median time.Duration
}

func (n NoisyRep) String() string {
	return fmt.Sprintf("%s/%s %s rep %d: p99 %v against the alone median %v", n.Disk, n.Load, ScenarioAlone, n.Rep,
		n.P99.Round(10*time.Microsecond), n.Median.Round(10*time.Microsecond))
}

func medianDur(v []time.Duration) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// NoisyAlone are the alone repetitions whose p99 is more than NoisyFactor
// from the median of their disk's and load's; with fewer than 3 there is
// no telling which one is off.
func (t Table) NoisyAlone() []NoisyRep {
	type key struct{ disk, load string }
	var order []key
	p99s := map[key][]time.Duration{}
	for _, r := range t.Rows {
		if r.Scenario != ScenarioAlone || r.P99 <= 0 {
			continue
		}
		k := key{r.Disk, r.Load}
		if _, ok := p99s[k]; !ok {
			order = append(order, k)
		}
		p99s[k] = append(p99s[k], r.P99)
	}
	var out []NoisyRep
	for _, k := range order {
		if len(p99s[k]) < 3 {
			continue
		}
		med := medianDur(p99s[k])
		for _, r := range t.Rows {
			if r.Scenario != ScenarioAlone || r.Disk != k.disk || r.Load != k.load || r.P99 <= 0 {
				continue
			}
			if f := float64(r.P99) / float64(med); f > NoisyFactor || f < 1/NoisyFactor {
				out = append(out, NoisyRep{k.disk, k.load, r.Rep, r.P99, med})
			}
		}
	}
	return out
}

// aloneFor is the alone row a row of rep is compared with: that
// repetition's, or, where it is noise (NoisyAlone), one with the p99 and
// max medians of the others.
func (t Table) aloneFor(disk, load string, rep int) (Row, bool) {
	a, ok := t.find(disk, load, ScenarioAlone, rep)
	if !ok {
		return a, false
	}
	noisy := map[int]bool{}
	for _, n := range t.NoisyAlone() {
		if n.Disk == disk && n.Load == load {
			noisy[n.Rep] = true
		}
	}
	if !noisy[rep] {
		return a, true
	}
	var p99s, maxes []time.Duration
	for _, r := range t.Rows {
		if r.Scenario == ScenarioAlone && r.Disk == disk && r.Load == load && !noisy[r.Rep] {
			p99s, maxes = append(p99s, r.P99), append(maxes, r.Max)
		}
	}
	a.P99, a.Max = medianDur(p99s), medianDur(maxes)
	return a, true
}

// Without is t less the rows of one scenario's repetition (a noisy alone
// one measured again).
func (t Table) Without(disk, scenario string, rep int) Table {
	var out Table
	for _, r := range t.Rows {
		if r.Disk == disk && r.Scenario == scenario && r.Rep == rep {
			continue
		}
		out.Rows = append(out.Rows, r)
	}
	return out
}
