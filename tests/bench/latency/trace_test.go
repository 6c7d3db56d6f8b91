package latency

import "testing"

func TestRateTrace(t *testing.T) {
	const (
		calm   = `time=2026-12-03T23:30:21.796Z level=INFO msg="staging write rate" write_rate_mbps=4 reason=calm congested=false queue_depth=0.889 io_stall_share=0.049` + "\n"
		probe  = `time=2026-12-03T23:30:24.754Z level=INFO msg="staging write rate" write_rate_mbps=6.5 reason="calm: probing up" congested=false queue_depth=0.953` + "\n"
		cutA   = `time=2026-12-03T23:30:55.030Z level=INFO msg="staging write rate" write_rate_mbps=4 reason="etcd over target: cutting" congested=true signal=wal_fsync p99_ms=53.333 queue_depth=1.079` + "\n"
		cutB   = `time=2026-12-03T23:31:00.030Z level=INFO msg="staging write rate" write_rate_mbps=5 reason="device queue too deep: cutting" congested=true queue_depth=9.5 etcd_cpu_wait_share=0.3` + "\n"
		floorA = `time=2026-12-03T23:31:05.030Z level=INFO msg="staging write rate" write_rate_mbps=4 reason="etcd over target: cutting" congested=true signal=wal_fsync p99_ms=53.333 queue_depth=1.2 etcd_cpu_wait_share=0.482` + "\n"
		floorB = `time=2026-12-03T23:31:10.030Z level=INFO msg="staging write rate" write_rate_mbps=4 reason="etcd over target: cutting" congested=true signal=backend_commit p99_ms=90 queue_depth=0.9 etcd_cpu_wait_share=0.51` + "\n"
		freeze = `time=2026-12-03T23:31:01.000Z level=INFO msg="latency guard decision" action=freeze reason="p99 above limit" queue_depth=40` + "\n"
	)
	for _, tc := range []struct {
		name, log, want string
		err             bool
	}{
		{"no controller", freeze, "", false},
		{"no cuts", calm + probe, "write-rate settings: 2, median 6.50 MB/s, max 6.50", false},
		{"cuts with their queue, guard lines ignored", calm + probe + cutA + freeze + cutB,
			"write-rate settings: 4, median 5.00 MB/s, max 6.50; 2 cuts, 0 of them at the floor already; device queue at the cuts median 9.50, max 9.50; etcd waiting for a CPU at the cuts median 0.30 of the time", false},
		{"cuts at the floor: the rate of the line before", calm + probe + cutA + floorA + floorB,
			"write-rate settings: 5, median 4.00 MB/s, max 6.50; 3 cuts, 2 of them at the floor already; device queue at the cuts median 1.08, max 1.20; etcd waiting for a CPU at the cuts median 0.51 of the time", false},
		{"a rate line with a broken number", `msg="staging write rate" write_rate_mbps=4 reason="etcd over target: cutting" queue_depth=x` + "\n", "", true},
		{"a rate line without its rate", `msg="staging write rate" reason=calm` + "\n", "", true},
	} {
		got, err := RateTrace([]byte(tc.log))
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: RateTrace = %q, %v; want %q (error %v)", tc.name, got, err, tc.want, tc.err)
		}
	}
}
