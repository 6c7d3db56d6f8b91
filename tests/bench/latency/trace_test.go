package latency

import "testing"

func TestRateTrace(t *testing.T) {
	const (
		calm   = `time=2026-12-03T23:30:21.796Z level=INFO msg="staging write rate" write_rate_mbps=4 reason=calm congested=false queue_depth=0.889 io_stall_share=0.049` + "\n"
		probe  = `time=2026-12-03T23:30:24.754Z level=INFO msg="staging write rate" write_rate_mbps=6.5 reason="calm: probing up" congested=false queue_depth=0.953` + "\n"
		cutA   = `time=2026-12-03T23:30:55.030Z level=INFO msg="staging write rate" write_rate_mbps=4 reason="etcd over target: cutting" congested=true signal=wal_fsync p99_ms=53.333 queue_depth=1.079` + "\n"
		cutB   = `time=2026-12-03T23:31:00.030Z level=INFO msg="staging write rate" write_rate_mbps=5 reason="device queue too deep: cutting" congested=true queue_depth=9.5` + "\n"
		freeze = `time=2026-12-03T23:31:01.000Z level=INFO msg="latency guard decision" action=freeze reason="p99 above limit" queue_depth=40` + "\n"
	)
	for _, tc := range []struct {
		name, log, want string
		err             bool
	}{
		{"no controller", freeze, "", false},
		{"no cuts", calm + probe, "write-rate settings: 2, median 6.50 MB/s, max 6.50", false},
		{"cuts with their queue, guard lines ignored", calm + probe + cutA + freeze + cutB,
			"write-rate settings: 4, median 5.00 MB/s, max 6.50; 2 cuts that lowered it (the log has no cut at the floor), device queue at them median 9.50, max 9.50", false},
		{"a rate line without its rate", `msg="staging write rate" reason=calm` + "\n", "", true},
	} {
		got, err := RateTrace([]byte(tc.log))
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: RateTrace = %q, %v; want %q (error %v)", tc.name, got, err, tc.want, tc.err)
		}
	}
}
