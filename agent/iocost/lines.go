// Package iocost turns on the kernel's proportional I/O controller
// (blk-iocost, cgroup v2's io.cost.qos and io.cost.model in the root
// cgroup) on the staging disks for the staging window, records what was in
// force first so that a restart after a crash puts it back, and restores
// it. This file is the pure part: the kernel's line formats (see the
// kernel's Documentation/admin-guide/cgroup-v2.rst, io.cost.qos and
// io.cost.model) and what to write back.
package iocost

import (
	"fmt"
	"strconv"
	"strings"
)

// QoS is one disk's io.cost.qos line without its "MAJ:MIN":
//
//	8:16 enable=1 ctrl=user rpct=95.00 rlat=20000 wpct=95.00 wlat=20000 min=5.00 max=150.00
//
// Percentiles and vrate bounds are percent; latencies microseconds.
type QoS struct {
	Enable bool
	// User is ctrl=user: the parameters below are in force. ctrl=auto
	// means the kernel's own, which it picks per device class.
	User       bool
	RPct, WPct float64
	RLat, WLat uint64
	Min, Max   float64
}

// Model is one disk's io.cost.model line without its "MAJ:MIN":
//
//	8:16 ctrl=user model=linear rbps=20000000 rseqiops=500 rrandiops=500 wbps=20000000 wseqiops=500 wrandiops=500
type Model struct {
	// User is ctrl=user; ctrl=auto is the kernel's model for the
	// device class (its parameters are then read-only information).
	User                      bool
	RBps, RSeqIOPS, RRandIOPS uint64
	WBps, WSeqIOPS, WRandIOPS uint64
}

// modelKeys are the linear model's parameters, in the kernel's order.
var modelKeys = []string{"rbps", "rseqiops", "rrandiops", "wbps", "wseqiops", "wrandiops"}

func (m *Model) field(k string) *uint64 {
	switch k {
	case "rbps":
		return &m.RBps
	case "rseqiops":
		return &m.RSeqIOPS
	case "rrandiops":
		return &m.RRandIOPS
	case "wbps":
		return &m.WBps
	case "wseqiops":
		return &m.WSeqIOPS
	case "wrandiops":
		return &m.WRandIOPS
	}
	return nil
}

// Lines splits a whole io.cost.qos or io.cost.model file into its lines
// by device ("8:16" -> the line's keys after the device). Only devices
// the controller was ever set up on are listed.
func Lines(text string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(text, "\n") {
		dev, rest, _ := strings.Cut(strings.TrimSpace(l), " ")
		if dev != "" {
			out[dev] = strings.TrimSpace(rest)
		}
	}
	return out
}

func keyValues(s string) (map[string]string, error) {
	kv := map[string]string{}
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%q: want key=value", f)
		}
		kv[k] = v
	}
	return kv, nil
}

func ctrl(kv map[string]string) (user bool, err error) {
	switch kv["ctrl"] {
	case "user":
		return true, nil
	case "auto", "":
		return false, nil
	}
	return false, fmt.Errorf("ctrl=%s: want auto or user", kv["ctrl"])
}

// ParseQoS parses an io.cost.qos line's keys (after "MAJ:MIN"). Keys a
// newer kernel may add are ignored.
func ParseQoS(s string) (QoS, error) {
	kv, err := keyValues(s)
	if err != nil {
		return QoS{}, fmt.Errorf("parsing io.cost.qos %q: %w", s, err)
	}
	var q QoS
	if q.User, err = ctrl(kv); err != nil {
		return QoS{}, fmt.Errorf("parsing io.cost.qos %q: %w", s, err)
	}
	switch kv["enable"] {
	case "1":
		q.Enable = true
	case "0", "":
	default:
		return QoS{}, fmt.Errorf("parsing io.cost.qos %q: enable=%s: want 0 or 1", s, kv["enable"])
	}
	for k, p := range map[string]*float64{"rpct": &q.RPct, "wpct": &q.WPct, "min": &q.Min, "max": &q.Max} {
		if v, ok := kv[k]; ok {
			if *p, err = strconv.ParseFloat(v, 64); err != nil {
				return QoS{}, fmt.Errorf("parsing io.cost.qos %q: %s: %w", s, k, err)
			}
		}
	}
	for k, p := range map[string]*uint64{"rlat": &q.RLat, "wlat": &q.WLat} {
		if v, ok := kv[k]; ok {
			if *p, err = strconv.ParseUint(v, 10, 64); err != nil {
				return QoS{}, fmt.Errorf("parsing io.cost.qos %q: %s: %w", s, k, err)
			}
		}
	}
	return q, nil
}

// Line is what to write to io.cost.qos for dev. A ctrl=auto line carries
// no parameters: the kernel takes any parameter as ctrl=user.
func (q QoS) Line(dev string) string {
	en := 0
	if q.Enable {
		en = 1
	}
	if !q.User {
		return fmt.Sprintf("%s enable=%d ctrl=auto", dev, en)
	}
	return fmt.Sprintf("%s enable=%d ctrl=user rpct=%.2f rlat=%d wpct=%.2f wlat=%d min=%.2f max=%.2f",
		dev, en, q.RPct, q.RLat, q.WPct, q.WLat, q.Min, q.Max)
}

// Validate checks what the kernel would refuse.
func (q QoS) Validate() error {
	switch {
	case q.RPct < 0 || q.RPct > 100 || q.WPct < 0 || q.WPct > 100:
		return fmt.Errorf("percentiles rpct=%.2f wpct=%.2f: want 0-100", q.RPct, q.WPct)
	case q.Min <= 0 || q.Max < q.Min || q.Max > 10000:
		return fmt.Errorf("vrate min=%.2f max=%.2f: want 0 < min <= max <= 10000 (percent)", q.Min, q.Max)
	}
	return nil
}

// ParseModel parses an io.cost.model line's keys (after "MAJ:MIN").
func ParseModel(s string) (Model, error) {
	kv, err := keyValues(s)
	if err != nil {
		return Model{}, fmt.Errorf("parsing io.cost.model %q: %w", s, err)
	}
	var m Model
	if m.User, err = ctrl(kv); err != nil {
		return Model{}, fmt.Errorf("parsing io.cost.model %q: %w", s, err)
	}
	if v, ok := kv["model"]; ok && v != "linear" {
		return Model{}, fmt.Errorf("parsing io.cost.model %q: model=%s: only linear is known", s, v)
	}
	for _, k := range modelKeys {
		if v, ok := kv[k]; ok {
			if *m.field(k), err = strconv.ParseUint(v, 10, 64); err != nil {
				return Model{}, fmt.Errorf("parsing io.cost.model %q: %s: %w", s, k, err)
			}
		}
	}
	return m, nil
}

// Line is what to write to io.cost.model for dev (ctrl=auto: no
// parameters, as for QoS.Line).
func (m Model) Line(dev string) string {
	if !m.User {
		return dev + " ctrl=auto"
	}
	return fmt.Sprintf("%s ctrl=user model=linear rbps=%d rseqiops=%d rrandiops=%d wbps=%d wseqiops=%d wrandiops=%d",
		dev, m.RBps, m.RSeqIOPS, m.RRandIOPS, m.WBps, m.WSeqIOPS, m.WRandIOPS)
}

// ParseDiskModel parses the operator's model of one disk, the kernel's
// parameters after the disk's name ("vda rbps=20000000 rseqiops=500
// rrandiops=500 wbps=20000000 wseqiops=500 wrandiops=500"). All six are
// required: a partial model would mix with whatever the kernel had.
func ParseDiskModel(s string) (disk string, m Model, err error) {
	disk, rest, _ := strings.Cut(strings.TrimSpace(s), " ")
	if disk == "" || strings.Contains(disk, "=") || strings.Contains(disk, "/") {
		return "", Model{}, fmt.Errorf("%q: want a disk's kernel name (\"vda\") then its parameters", s)
	}
	kv, err := keyValues(rest)
	if err != nil {
		return "", Model{}, fmt.Errorf("%q: %w", s, err)
	}
	m.User = true
	for k, v := range kv {
		p := m.field(k)
		if p == nil {
			return "", Model{}, fmt.Errorf("%q: unknown parameter %s (want %s)", s, k, strings.Join(modelKeys, ", "))
		}
		if *p, err = strconv.ParseUint(v, 10, 64); err != nil || *p == 0 {
			return "", Model{}, fmt.Errorf("%q: %s=%s: want a positive integer", s, k, v)
		}
	}
	for _, k := range modelKeys {
		if _, ok := kv[k]; !ok {
			return "", Model{}, fmt.Errorf("%q: missing %s (all of %s are required)", s, k, strings.Join(modelKeys, ", "))
		}
	}
	return disk, m, nil
}

// RestoreQoSLine is what puts back the io.cost.qos line prev (as read
// before the window; "" when the disk had none: the controller was never
// set up on it, which is off with the kernel's parameters).
func RestoreQoSLine(dev, prev string) (string, error) {
	if prev == "" {
		return QoS{}.Line(dev), nil
	}
	q, err := ParseQoS(prev)
	if err != nil {
		return "", err
	}
	return q.Line(dev), nil
}

// RestoreModelLine is RestoreQoSLine for io.cost.model.
func RestoreModelLine(dev, prev string) (string, error) {
	if prev == "" {
		return Model{}.Line(dev), nil
	}
	m, err := ParseModel(prev)
	if err != nil {
		return "", err
	}
	return m.Line(dev), nil
}

// Modelled are the disks models has a model for, in disks' order: where
// staging.iocost = "with-model" puts iocost.
func Modelled(disks []string, models map[string]Model) []string {
	var on []string
	for _, d := range disks {
		if _, ok := models[d]; ok {
			on = append(on, d)
		}
	}
	return on
}
