package coord

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// LeaderChanges counts how often the leader changed in a series of samples
// of "which member leads" (-1: none known). A gap without a leader followed
// by the same leader is no change; the first known leader is the baseline.
func LeaderChanges(samples []int) int {
	n, last := 0, -1
	for _, s := range samples {
		if s < 0 {
			continue
		}
		if last >= 0 && s != last {
			n++
		}
		last = s
	}
	return n
}

// Rollout is one measured rollout of the cluster.
type Rollout struct {
	InitialLeader int
	LeaderChanges int
	Elections     uint64          // raft term increase
	Missing       []time.Duration // per member: down until serving again
	Total         time.Duration
	Order         []int // members in the order they rebooted
}

// Spread is min/median/max of a series.
type Spread struct{ Min, Median, Max float64 }

func spread(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{s[0], med, s[len(s)-1]}
}

func (s Spread) String() string {
	return fmt.Sprintf("%s / %s / %s", trim(s.Min), trim(s.Median), trim(s.Max))
}

func trim(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", f), "0"), ".")
}

// RolloutSummary summarizes the rollouts of one mode.
type RolloutSummary struct {
	Mode          string
	Rollouts      int
	LeaderChanges Spread
	Elections     Spread
	MissingS      Spread // seconds a member was missing, over all members and rollouts
	TotalS        Spread
	// LeaderFirst counts rollouts in which the initial leader was not the
	// last to reboot.
	LeaderNotLast int
}

// Summarize reduces rollouts.
func Summarize(mode string, rs []Rollout) RolloutSummary {
	var lc, el, miss, tot []float64
	notLast := 0
	for _, r := range rs {
		lc = append(lc, float64(r.LeaderChanges))
		el = append(el, float64(r.Elections))
		tot = append(tot, r.Total.Seconds())
		for _, m := range r.Missing {
			miss = append(miss, m.Seconds())
		}
		if len(r.Order) > 0 && r.Order[len(r.Order)-1] != r.InitialLeader {
			notLast++
		}
	}
	return RolloutSummary{mode, len(rs), spread(lc), spread(el), spread(miss), spread(tot), notLast}
}

// RolloutTable renders summaries as a markdown table.
func RolloutTable(ss []RolloutSummary) string {
	var b strings.Builder
	b.WriteString("| mode | rollouts | leader changes min/median/max | elections (term +) min/median/max | member missing s min/median/max | rollout s min/median/max | leader not rebooted last |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, s := range ss {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %d |\n", s.Mode, s.Rollouts,
			s.LeaderChanges, s.Elections, s.MissingS, s.TotalS, s.LeaderNotLast)
	}
	return b.String()
}
