package latency

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// RateTrace sums up the write-rate controller's changes in stage-once's
// log (its "staging write rate" lines): how high it set the cap, how often
// it cut, and how deep the device queue was at the cuts. A cut with a
// shallow queue is one the disk did not call for: what etcd waited on then
// was not the stager's bandwidth. Empty when the log has no such line (the
// guard off, a fixed cap, not the agent).
func RateTrace(log []byte) (string, error) {
	var rates, cutQueues []float64
	for line := range strings.Lines(string(log)) {
		if !strings.Contains(line, `msg="staging write rate"`) {
			continue
		}
		v, ok := logField(line, "write_rate_mbps")
		if !ok {
			return "", fmt.Errorf("write rate: no write_rate_mbps in %q", line)
		}
		r, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return "", fmt.Errorf("write rate: %w", err)
		}
		rates = append(rates, r)
		if !strings.Contains(line, `: cutting"`) { // every cut's reason ends so
			continue
		}
		if v, ok := logField(line, "queue_depth"); ok {
			q, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return "", fmt.Errorf("write rate: queue_depth: %w", err)
			}
			cutQueues = append(cutQueues, q)
		}
	}
	if len(rates) == 0 {
		return "", nil
	}
	s := fmt.Sprintf("write-rate settings: %d, median %.2f MB/s, max %.2f", len(rates), median(rates), slices.Max(rates))
	if len(cutQueues) > 0 {
		s += fmt.Sprintf("; %d cuts that lowered it (the log has no cut at the floor), device queue at them median %.2f, max %.2f", len(cutQueues), median(cutQueues), slices.Max(cutQueues))
	}
	return s, nil
}

// median of xs (not empty), the upper middle for an even count.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
