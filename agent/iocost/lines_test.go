package iocost

import (
	"slices"
	"strings"
	"testing"
)

func TestQoSLines(t *testing.T) {
	cases := []struct {
		name, in string
		want     QoS
		line     string // what QoS.Line writes back for 8:16
		err      string
	}{
		{"the kernel's default on a disk it was set up on",
			"enable=0 ctrl=auto rpct=0.00 rlat=250000 wpct=0.00 wlat=250000 min=1.00 max=10000.00",
			QoS{RLat: 250000, WLat: 250000, Min: 1, Max: 10000},
			"8:16 enable=0 ctrl=auto", ""},
		{"the issue's harness", "enable=1 ctrl=user rpct=95.00 rlat=20000 wpct=95.00 wlat=20000 min=5.00 max=150.00",
			QoS{Enable: true, User: true, RPct: 95, RLat: 20000, WPct: 95, WLat: 20000, Min: 5, Max: 150},
			"8:16 enable=1 ctrl=user rpct=95.00 rlat=20000 wpct=95.00 wlat=20000 min=5.00 max=150.00", ""},
		{"enabled with the kernel's parameters", "enable=1 ctrl=auto rpct=0.00 rlat=5000 wpct=0.00 wlat=5000 min=50.00 max=150.00",
			QoS{Enable: true, RLat: 5000, WLat: 5000, Min: 50, Max: 150}, "8:16 enable=1 ctrl=auto", ""},
		{"a key a newer kernel adds is ignored", "enable=1 ctrl=user rpct=90 rlat=1 wpct=90 wlat=2 min=1 max=100 future=3",
			QoS{Enable: true, User: true, RPct: 90, RLat: 1, WPct: 90, WLat: 2, Min: 1, Max: 100},
			"8:16 enable=1 ctrl=user rpct=90.00 rlat=1 wpct=90.00 wlat=2 min=1.00 max=100.00", ""},
		{"bad enable", "enable=2 ctrl=auto", QoS{}, "", "enable=2"},
		{"bad ctrl", "enable=1 ctrl=maybe", QoS{}, "", "ctrl=maybe"},
		{"bad latency", "enable=1 ctrl=user rlat=x", QoS{}, "", "rlat"},
		{"not key=value", "enable", QoS{}, "", "key=value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseQoS(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("ParseQoS = %+v, want %+v", got, c.want)
			}
			if l := got.Line("8:16"); l != c.line {
				t.Errorf("Line = %q, want %q", l, c.line)
			}
		})
	}
}

func TestModelLines(t *testing.T) {
	cases := []struct {
		name, in string
		want     Model
		line     string
		err      string
	}{
		{"the kernel's auto model", "ctrl=auto model=linear rbps=174019176 rseqiops=41708 rrandiops=370 wbps=178075866 wseqiops=42705 wrandiops=378",
			Model{RBps: 174019176, RSeqIOPS: 41708, RRandIOPS: 370, WBps: 178075866, WSeqIOPS: 42705, WRandIOPS: 378}, "8:0 ctrl=auto", ""},
		{"an operator's model", "ctrl=user model=linear rbps=20000000 rseqiops=500 rrandiops=500 wbps=20000000 wseqiops=500 wrandiops=500",
			Model{User: true, RBps: 20000000, RSeqIOPS: 500, RRandIOPS: 500, WBps: 20000000, WSeqIOPS: 500, WRandIOPS: 500},
			"8:0 ctrl=user model=linear rbps=20000000 rseqiops=500 rrandiops=500 wbps=20000000 wseqiops=500 wrandiops=500", ""},
		{"an unknown model", "ctrl=user model=quadratic", Model{}, "", "model=quadratic"},
		{"bad number", "ctrl=user model=linear rbps=-1", Model{}, "", "rbps"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseModel(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("ParseModel = %+v, want %+v", got, c.want)
			}
			if l := got.Line("8:0"); l != c.line {
				t.Errorf("Line = %q, want %q", l, c.line)
			}
		})
	}
}

func TestParseDiskModel(t *testing.T) {
	full := "rbps=20000000 rseqiops=500 rrandiops=500 wbps=20000000 wseqiops=500 wrandiops=500"
	cases := []struct {
		name, in, disk, err string
	}{
		{"all six", "vda " + full, "vda", ""},
		{"order does not matter", "nvme0n1 wrandiops=1 wseqiops=2 wbps=3 rrandiops=4 rseqiops=5 rbps=6", "nvme0n1", ""},
		{"one missing", "vda rbps=1 rseqiops=1 rrandiops=1 wbps=1 wseqiops=1", "", "missing wrandiops"},
		{"unknown parameter", "vda " + full + " rlat=5", "", "unknown parameter rlat"},
		{"zero", "vda " + strings.Replace(full, "wbps=20000000", "wbps=0", 1), "", "wbps=0"},
		{"no disk name", full, "", "kernel name"},
		{"a path, not a name", "/dev/vda " + full, "", "kernel name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			disk, m, err := ParseDiskModel(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if disk != c.disk || !m.User || m.WRandIOPS == 0 {
				t.Errorf("got %s %+v", disk, m)
			}
		})
	}
}

// TestRestoreLines: what goes back is what was in force, and a ctrl=auto
// line goes back without parameters (the kernel would take them as
// ctrl=user and freeze the auto values it had then).
func TestRestoreLines(t *testing.T) {
	cases := []struct {
		name, prevQoS, prevModel, qos, model string
	}{
		{"never set up: off, the kernel's parameters and model", "", "", "8:16 enable=0 ctrl=auto", "8:16 ctrl=auto"},
		{"off with the kernel's parameters",
			"enable=0 ctrl=auto rpct=0.00 rlat=250000 wpct=0.00 wlat=250000 min=1.00 max=10000.00",
			"ctrl=auto model=linear rbps=1 rseqiops=2 rrandiops=3 wbps=4 wseqiops=5 wrandiops=6",
			"8:16 enable=0 ctrl=auto", "8:16 ctrl=auto"},
		{"an operator's own settings come back as they were",
			"enable=1 ctrl=user rpct=99.00 rlat=10000 wpct=99.00 wlat=10000 min=25.00 max=100.00",
			"ctrl=user model=linear rbps=1 rseqiops=2 rrandiops=3 wbps=4 wseqiops=5 wrandiops=6",
			"8:16 enable=1 ctrl=user rpct=99.00 rlat=10000 wpct=99.00 wlat=10000 min=25.00 max=100.00",
			"8:16 ctrl=user model=linear rbps=1 rseqiops=2 rrandiops=3 wbps=4 wseqiops=5 wrandiops=6"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, err := RestoreQoSLine("8:16", c.prevQoS)
			if err != nil || q != c.qos {
				t.Errorf("RestoreQoSLine = %q, %v; want %q", q, err, c.qos)
			}
			m, err := RestoreModelLine("8:16", c.prevModel)
			if err != nil || m != c.model {
				t.Errorf("RestoreModelLine = %q, %v; want %q", m, err, c.model)
			}
		})
	}
	if _, err := RestoreQoSLine("8:16", "enable=7"); err == nil {
		t.Error("an unreadable record restored something")
	}
}

func TestLines(t *testing.T) {
	got := Lines("8:0 enable=0 ctrl=auto\n253:0 enable=1 ctrl=user rpct=95.00\n\n")
	if len(got) != 2 || got["8:0"] != "enable=0 ctrl=auto" || got["253:0"] != "enable=1 ctrl=user rpct=95.00" {
		t.Fatalf("Lines = %q", got)
	}
}

func TestModelled(t *testing.T) {
	models := map[string]Model{"vdb": {}, "nvme0n1": {}}
	for _, tc := range []struct{ disks, want []string }{
		{[]string{"vda", "vdb"}, []string{"vdb"}},
		{[]string{"nvme0n1", "vdb"}, []string{"nvme0n1", "vdb"}},
		{[]string{"vda"}, nil},
		{nil, nil},
	} {
		if got := Modelled(tc.disks, models); !slices.Equal(got, tc.want) {
			t.Errorf("Modelled(%v) = %v, want %v", tc.disks, got, tc.want)
		}
	}
}
