package iocost

import (
	"slices"
	"testing"
)

func TestDisks(t *testing.T) {
	models := map[string]Model{"vdb": {User: true}}
	disks := []string{"vda", "vdb"}
	cases := []struct {
		mode    Mode
		ordered bool
		want    []string
	}{
		{Off, true, nil},
		{Off, false, nil},
		{On, false, disks},
		{On, true, disks},
		{WithModel, true, []string{"vdb"}},
		{WithModel, false, []string{"vdb"}},
		// auto: learning on every disk where the journal orders data
		// (ext4's x1.80), only the modelled ones elsewhere (XFS's x4.07
		// against the rate loop's x2.38).
		{Auto, true, disks},
		{Auto, false, []string{"vdb"}},
	}
	for _, c := range cases {
		if got := Disks(c.mode, disks, models, c.ordered); !slices.Equal(got, c.want) {
			t.Errorf("Disks(%s, ordersData=%v) = %v, want %v", c.mode, c.ordered, got, c.want)
		}
	}
	if got := Disks(Auto, disks, nil, false); got != nil {
		t.Errorf("auto without models off an ordered journal = %v, want none (the rate loop)", got)
	}
}

func TestEffective(t *testing.T) {
	for _, c := range []struct {
		mode    Mode
		ordered bool
		want    Mode
	}{{Auto, true, On}, {Auto, false, WithModel}, {On, false, On}, {WithModel, true, WithModel}, {Off, true, Off}} {
		if got := Effective(c.mode, c.ordered); got != c.want {
			t.Errorf("Effective(%s, %v) = %s, want %s", c.mode, c.ordered, got, c.want)
		}
	}
}

func TestMemoryAllowance(t *testing.T) {
	cases := []struct {
		name                     string
		configured               uint64
		auto, iocostOn, ordersOn bool
		want                     uint64
		why                      string
	}{
		{"auto, iocost on an ordered journal", 0, true, true, true, 8 << 20, "iocost on an ordered journal"},
		{"auto, the rate loop on XFS", 0, true, false, false, 32 << 20, "no iocost, journal does not order data"},
		{"auto, iocost on XFS (a given model)", 0, true, true, false, 32 << 20, "iocost on a journal that does not order data"},
		{"auto, ordered journal without iocost", 0, true, false, true, 32 << 20, "no iocost"},
		{"an explicit size wins", 64 << 20, false, true, true, 64 << 20, "staging.memory_high"},
		{"infinity wins", 0, false, true, true, 0, `staging.memory_high = "infinity"`},
	}
	for _, c := range cases {
		got, why := MemoryAllowance(c.configured, c.auto, c.iocostOn, c.ordersOn)
		if got != c.want || why != c.why {
			t.Errorf("%s: %d (%s), want %d (%s)", c.name, got, why, c.want, c.why)
		}
	}
}

func TestFormatMemory(t *testing.T) {
	for b, want := range map[uint64]string{8 << 20: "8M", 32 << 20: "32M", 1536 << 20: "1536M", 1000: "1000"} {
		if got := FormatMemory(b); got != want {
			t.Errorf("FormatMemory(%d) = %q, want %q", b, got, want)
		}
	}
}
