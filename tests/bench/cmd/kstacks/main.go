// Command kstacks samples, in the latency benchmark's guest
// (BENCH_PROFILE=1), where the threads of etcd's and the fio job's units
// wait in the kernel and how many requests the measured disk has in
// flight, every -interval until SIGTERM or SIGINT, then writes the summary
// (tests/bench/kstacks.Summary, JSON) to -out. It needs root
// (/proc/PID/task/TID/stack). Example:
//
//	kstacks -disk vda -cgroup etcd=system.slice/bench-etcd.service -comm jbd2='jbd2/*' -out /var/tmp/kstacks.json
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/update-agent/update-agent/tests/bench/kstacks"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kstacks:", err)
		os.Exit(1)
	}
}

func run() error {
	c, err := kstacks.ParseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	s := kstacks.NewSampler("/", c)
	defer s.Close()
	s.Rescan()
	tick := time.NewTicker(c.Interval)
	defer tick.Stop()
	first := time.Now()
	last, lastRescan := first, first
sampling:
	for {
		s.Sample()
		last = time.Now()
		if last.Sub(lastRescan) >= c.Rescan {
			s.Rescan()
			lastRescan = last
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			break sampling
		}
	}
	s.ReadCounters()
	sum := s.Summary()
	sum.IntervalMS = float64(c.Interval) / float64(time.Millisecond)
	sum.StartNS, sum.EndNS, sum.Seconds = first.UnixNano(), last.UnixNano(), last.Sub(first).Seconds()
	b, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	// Whole or not at all: the bench reads it once the unit has stopped.
	tmp := c.Out + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, c.Out)
}
