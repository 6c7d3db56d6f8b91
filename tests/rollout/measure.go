package rollout

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

// Result is one measured rollout.
type Result struct {
	InitialLeader int
	LeaderChanges int
	// Elections is the raft term increase; Moves the agents' successful
	// MoveLeader calls, each of which takes one term. The difference are
	// elections no agent planned (a timeout, or a leader's own hand-over
	// as it stops).
	Elections uint64
	Moves     int64
	// Missing is how long each rebooted member was down, until it served
	// again, in reboot order.
	Missing []time.Duration
	Total   time.Duration
	Order   []int // node indexes in reboot order
	// Violations: reboots while another member was down.
	Violations []string
}

// Unplanned is the number of elections no agent's MoveLeader caused.
func (r Result) Unplanned() int64 { return int64(r.Elections) - r.Moves }

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

// Summary summarizes the rollouts of one mode.
type Summary struct {
	Mode          string
	Members       int
	Rollouts      int
	LeaderChanges Spread
	Unplanned     Spread
	UnplannedSum  int64
	MissingS      Spread // seconds a rebooted member was missing, over all members and rollouts
	TotalS        Spread
	// LeaderNotLast counts rollouts in which the initial leader was not
	// the last to reboot.
	LeaderNotLast int
	Violations    int
}

// Summarize reduces rollouts.
func Summarize(mode string, members int, rs []Result) Summary {
	var lc, un, miss, tot []float64
	s := Summary{Mode: mode, Members: members, Rollouts: len(rs)}
	for _, r := range rs {
		lc = append(lc, float64(r.LeaderChanges))
		un = append(un, float64(r.Unplanned()))
		s.UnplannedSum += r.Unplanned()
		tot = append(tot, r.Total.Seconds())
		for _, m := range r.Missing {
			miss = append(miss, m.Seconds())
		}
		if len(r.Order) > 0 && r.Order[len(r.Order)-1] != r.InitialLeader {
			s.LeaderNotLast++
		}
		s.Violations += len(r.Violations)
	}
	s.LeaderChanges, s.Unplanned, s.MissingS, s.TotalS = spread(lc), spread(un), spread(miss), spread(tot)
	return s
}

// Table renders summaries as a markdown table.
func Table(ss []Summary) string {
	var b strings.Builder
	b.WriteString("| mode | members | rollouts | leader changes min/median/max | elections not from a planned MoveLeader min/median/max (total) | member missing s min/median/max | rollout s min/median/max | initial leader not last | reboots while another member was down |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range ss {
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s (%d) | %s | %s | %d | %d |\n", s.Mode, s.Members, s.Rollouts,
			s.LeaderChanges, s.Unplanned, s.UnplannedSum, s.MissingS, s.TotalS, s.LeaderNotLast, s.Violations)
	}
	return b.String()
}
