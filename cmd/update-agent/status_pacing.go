package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/update-agent/update-agent/agent/guard"
)

// pacingNow says in a line how the open window paces staging now: its
// pacing, the brake's state and the write rate loop's rate, and etcd's
// WAL fsync p99 against the baseline the guard judges it by.
func pacingNow(l guard.Live) string {
	parts := []string{l.Pacing}
	switch {
	case !l.Guarded:
		parts = append(parts, "no latency guard")
	case l.At.IsZero():
		parts = append(parts, "guard starting")
	default:
		if l.Braking {
			parts = append(parts, "brake ON (staging frozen)")
		} else {
			parts = append(parts, "brake off")
		}
		if l.Rate > 0 {
			parts = append(parts, fmt.Sprintf("write rate %.1f MiB/s", float64(l.Rate)/(1<<20)))
		}
		parts = append(parts, etcdAgainstBaseline(l.WALP99, l.WALBaseline))
	}
	return strings.Join(parts, " · ")
}

func etcdAgainstBaseline(p99, base time.Duration) string {
	switch {
	case p99 <= 0 && base <= 0:
		return "etcd WAL p99 not measured"
	case p99 <= 0:
		return fmt.Sprintf("etcd WAL p99 not measured yet (baseline %s)", msText(base))
	case base <= 0:
		return fmt.Sprintf("etcd WAL p99 %s (no baseline)", msText(p99))
	}
	return fmt.Sprintf("etcd WAL p99 %s (baseline %s, x%.1f)", msText(p99), msText(base), float64(p99)/float64(base))
}

// msText is a latency in milliseconds, to a tenth below 10 ms.
func msText(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	if ms < 10 {
		return fmt.Sprintf("%.1f ms", ms)
	}
	return fmt.Sprintf("%.0f ms", ms)
}
