package latency

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// RateTrace sums up the write-rate controller's changes in stage-once's
// log (its "staging write rate" lines): how high it set the cap, how often
// it cut and how many of the cuts found it at its floor already (logged,
// changing nothing), how deep the device queue was at the cuts and how
// much of the time etcd waited for a CPU then. A cut with a shallow queue
// is one the disk did not call for; one with etcd waiting for a CPU most
// of the time, one the write rate cannot answer. Empty when the log has no
// such line (the guard off, a fixed cap, not the agent).
func RateTrace(log []byte) (string, error) {
	var rates, cutQueues, cutCPU []float64
	cuts, atFloor := 0, 0
	for line := range strings.Lines(string(log)) {
		if !strings.Contains(line, `msg="staging write rate"`) {
			continue
		}
		r, ok, err := floatField(line, "write_rate_mbps")
		if err == nil && !ok {
			err = fmt.Errorf("no write_rate_mbps in %q", line)
		}
		if err != nil {
			return "", fmt.Errorf("write rate: %w", err)
		}
		prev := -1.0
		if len(rates) > 0 {
			prev = rates[len(rates)-1]
		}
		rates = append(rates, r)
		if !strings.Contains(line, `: cutting"`) { // every cut's reason ends so
			continue
		}
		cuts++
		if r == prev {
			atFloor++
		}
		for _, f := range []struct {
			key  string
			into *[]float64
		}{{"queue_depth", &cutQueues}, {"etcd_cpu_wait_share", &cutCPU}} {
			v, ok, err := floatField(line, f.key)
			if err != nil {
				return "", fmt.Errorf("write rate: %w", err)
			}
			if ok {
				*f.into = append(*f.into, v)
			}
		}
	}
	if len(rates) == 0 {
		return "", nil
	}
	s := fmt.Sprintf("write-rate settings: %d, median %.2f MB/s, max %.2f", len(rates), median(rates), slices.Max(rates))
	if cuts > 0 {
		s += fmt.Sprintf("; %d cuts, %d of them at the floor already", cuts, atFloor)
	}
	if len(cutQueues) > 0 {
		s += fmt.Sprintf("; device queue at the cuts median %.2f, max %.2f", median(cutQueues), slices.Max(cutQueues))
	}
	if len(cutCPU) > 0 {
		s += fmt.Sprintf("; etcd waiting for a CPU at the cuts median %.2f of the time", median(cutCPU))
	}
	return s, nil
}

// floatField is the number logged as key= in line; ok is false when the
// line has no such field.
func floatField(line, key string) (v float64, ok bool, err error) {
	f, ok := logField(line, key)
	if !ok {
		return 0, false, nil
	}
	v, err = strconv.ParseFloat(f, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", key, err)
	}
	return v, true, nil
}

// median of xs (not empty), the upper middle for an even count.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
