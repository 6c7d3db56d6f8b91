package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"15m": 15 * time.Minute, "1h30m": 90 * time.Minute, "90s": 90 * time.Second,
		"500ms": 500 * time.Millisecond, "0s": 0, " 2h ": 2 * time.Hour,
	} {
		var d Duration
		if err := d.UnmarshalTOML(in); err != nil || d.D() != want {
			t.Errorf("%q -> %v, %v; want %v", in, d.D(), err, want)
		}
	}
	for _, in := range []any{"15", "15 min", "", int64(900), 1.5, true} {
		var d Duration
		if err := d.UnmarshalTOML(in); err == nil {
			t.Errorf("%v accepted", in)
		}
	}
	for d, want := range map[time.Duration]string{
		2 * time.Hour: "2h", 90 * time.Minute: "1h30m", 15 * time.Minute: "15m", 90 * time.Second: "1m30s",
		time.Second: "1s", 500 * time.Millisecond: "500ms", 0: "0s", -time.Minute: "-1m",
		time.Hour + time.Second: "1h0m1s",
	} {
		if got := Duration(d).String(); got != want {
			t.Errorf("String(%v) = %q, want %q", d, got, want)
		}
		var back Duration
		if err := back.UnmarshalText([]byte(Duration(d).String())); err != nil || back.D() != d {
			t.Errorf("round trip of %v: %v, %v", d, back.D(), err)
		}
	}
}

func TestSizes(t *testing.T) {
	mem := map[string]MemorySize{
		"256M": 256 << 20, "1G": 1 << 30, "1.5G": 3 << 29, "4096": 4096, "4096B": 4096,
		"2T": 2 << 40, "64K": 64 << 10, "infinity": 0, "": 0, "auto": MemorySizeAuto,
	}
	for in, want := range mem {
		var m MemorySize
		if err := m.UnmarshalTOML(in); err != nil || m != want {
			t.Errorf("memory %q -> %d, %v; want %d", in, m, err, want)
		}
	}
	bw := map[string]Bandwidth{"20M": 20_000_000, "1.5G": 1_500_000_000, "500K": 500_000, "": 0, "infinity": 0, "auto": BandwidthAuto}
	for in, want := range bw {
		var b Bandwidth
		if err := b.UnmarshalTOML(in); err != nil || b != want {
			t.Errorf("bandwidth %q -> %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []any{"256MB", "256Mi", "-1M", "M", "1e6", "0x10", "0", "1 M", int64(5), "256m"} {
		var m MemorySize
		var b Bandwidth
		if m.UnmarshalTOML(in) == nil {
			t.Errorf("memory %v accepted", in)
		}
		if b.UnmarshalTOML(in) == nil {
			t.Errorf("bandwidth %v accepted", in)
		}
	}
	// Formatting picks the largest exact suffix, so values round-trip.
	for m, want := range map[MemorySize]string{256 << 20: "256M", 1536 << 20: "1536M", 1000: "1000", 0: "infinity", 3 << 30: "3G", MemorySizeAuto: "auto"} {
		if got := m.String(); got != want {
			t.Errorf("MemorySize(%d) = %q, want %q", m, got, want)
		}
	}
	for b, want := range map[Bandwidth]string{20_000_000: "20M", 1_500_000: "1500K", 0: "", 1024: "1024", BandwidthAuto: "auto"} {
		if got := b.String(); got != want {
			t.Errorf("Bandwidth(%d) = %q, want %q", b, got, want)
		}
	}
}

func TestCPUWeight(t *testing.T) {
	for in, want := range map[any]CPUWeight{"idle": CPUWeightIdle, int64(1): 1, int64(10000): 10000, "250": 250} {
		var c CPUWeight
		if err := c.UnmarshalTOML(in); err != nil || c != want {
			t.Errorf("%v -> %d, %v", in, c, err)
		}
	}
	for _, in := range []any{int64(0), int64(10001), int64(-1), "Idle", "", 1.0, true} {
		var c CPUWeight
		if err := c.UnmarshalTOML(in); err == nil || !strings.Contains(err.Error(), `1-10000 or "idle"`) {
			t.Errorf("%v: %v", in, err)
		}
	}
	if CPUWeightIdle.String() != "idle" || CPUWeight(100).String() != "100" {
		t.Error("String")
	}
}

func TestIOClassNumber(t *testing.T) {
	// systemd's D-Bus IOSchedulingClass values (IOPRIO_CLASS_*).
	for name, want := range map[string]int32{"none": 0, "realtime": 1, "best-effort": 2, "idle": 3, "low": -1} {
		if got := IOClassNumber(name); got != want {
			t.Errorf("IOClassNumber(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestIOCostMode(t *testing.T) {
	for v, want := range map[any]IOCostMode{true: IOCostOn, false: IOCostOff, "with-model": IOCostWithModel, "auto": IOCostAuto} {
		var m IOCostMode
		if err := m.UnmarshalTOML(v); err != nil || m != want {
			t.Errorf("%v: %v, %v; want %v", v, m, err, want)
		}
		if fmt.Sprint(v) != m.String() {
			t.Errorf("%v written back as %s", v, m)
		}
	}
}
