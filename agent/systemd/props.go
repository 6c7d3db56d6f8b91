// Package systemd is the agent's edge to systemd over D-Bus: transient
// staging units with an I/O and CPU policy, runtime drop-ins, freeze/thaw,
// and unit state. Building properties is pure (props.go); conn.go only
// sends them.
package systemd

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Ioprio classes as systemd expects them over D-Bus (IOPRIO_CLASS_* from the
// kernel's ioprio.h).
const (
	ioprioClassRealtime   int32 = 1
	ioprioClassBestEffort int32 = 2
	ioprioClassIdle       int32 = 3
)

// cpuWeightIdle is how systemd encodes CPUWeight=idle on the bus
// (CGROUP_WEIGHT_IDLE, systemd >= 250: sets cpu.idle=1 on the cgroup).
const cpuWeightIdle uint64 = 0

// weightUnset is CGROUP_WEIGHT_INVALID: "not configured".
const weightUnset = ^uint64(0)

// DeviceValue is one entry of an a(st) device property: a device node or a
// path on a file system, and a number (bytes/s, or microseconds).
type DeviceValue struct {
	Path  string
	Value uint64
}

// Policy is the resource policy applied to the process that writes the
// update. Zero values leave systemd's defaults.
type Policy struct {
	// IOSchedulingClass is "idle", "best-effort" or "realtime".
	IOSchedulingClass string
	// IOSchedulingPriority is 0 (highest) to 7; nil leaves the default.
	IOSchedulingPriority *int
	// Nice is -20 to 19; nil leaves the default.
	Nice *int
	// CPUWeight is "idle" or 1-10000; "" leaves the default.
	CPUWeight string
	// IOWeight is 1-10000; 0 leaves the default.
	IOWeight uint64
	// MemoryHigh in bytes bounds the unit's page cache, so dirty data is
	// written back in small pieces instead of one big flush; 0 = no limit.
	MemoryHigh uint64
	// IOWriteBandwidthMax caps writes per device (bytes/s);
	// IOWriteIOPSMax their number (IOPS).
	IOWriteBandwidthMax []DeviceValue
	IOWriteIOPSMax      []DeviceValue
}

// Validate reports the first out-of-range field, naming it.
func (p Policy) Validate() error {
	if _, err := ioprioClass(p.IOSchedulingClass); err != nil {
		return err
	}
	if v := p.IOSchedulingPriority; v != nil && (*v < 0 || *v > 7) {
		return fmt.Errorf("IOSchedulingPriority %d: want 0-7", *v)
	}
	if v := p.Nice; v != nil && (*v < -20 || *v > 19) {
		return fmt.Errorf("Nice %d: want -20..19", *v)
	}
	if _, err := cpuWeight(p.CPUWeight); err != nil {
		return err
	}
	if p.IOWeight > 10000 {
		return fmt.Errorf("IOWeight %d: want 1-10000", p.IOWeight)
	}
	for _, d := range p.IOWriteBandwidthMax {
		if d.Path == "" || d.Value == 0 {
			return fmt.Errorf("IOWriteBandwidthMax %q %d: want a device path and a non-zero rate", d.Path, d.Value)
		}
	}
	for _, d := range p.IOWriteIOPSMax {
		if d.Path == "" || d.Value == 0 {
			return fmt.Errorf("IOWriteIOPSMax %q %d: want a device path and a non-zero rate", d.Path, d.Value)
		}
	}
	return nil
}

func ioprioClass(s string) (int32, error) {
	switch s {
	case "":
		return 0, nil
	case "idle":
		return ioprioClassIdle, nil
	case "best-effort":
		return ioprioClassBestEffort, nil
	case "realtime":
		return ioprioClassRealtime, nil
	}
	return 0, fmt.Errorf("IOSchedulingClass %q: want idle, best-effort or realtime", s)
}

func cpuWeight(s string) (uint64, error) {
	switch s {
	case "":
		return weightUnset, nil
	case "idle":
		return cpuWeightIdle, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v < 1 || v > 10000 {
		return 0, fmt.Errorf("CPUWeight %q: want idle or 1-10000", s)
	}
	return v, nil
}

// execProperties are the policy parts that apply when a process starts
// (they cannot change a running process).
func (p Policy) execProperties() []sd.Property {
	var props []sd.Property
	if c, _ := ioprioClass(p.IOSchedulingClass); c != 0 {
		props = append(props, prop("IOSchedulingClass", c))
	}
	if p.IOSchedulingPriority != nil {
		props = append(props, prop("IOSchedulingPriority", int32(*p.IOSchedulingPriority)))
	}
	if p.Nice != nil {
		props = append(props, prop("Nice", int32(*p.Nice)))
	}
	return props
}

// CgroupProperties are the policy parts systemd can change on a running
// unit (SetUnitProperties).
func (p Policy) CgroupProperties() []sd.Property {
	var props []sd.Property
	if w, _ := cpuWeight(p.CPUWeight); w != weightUnset {
		props = append(props, prop("CPUWeight", w))
	}
	if p.IOWeight != 0 {
		props = append(props, prop("IOWeight", p.IOWeight))
	}
	if p.MemoryHigh != 0 {
		props = append(props, prop("MemoryHigh", p.MemoryHigh))
	}
	if len(p.IOWriteBandwidthMax) > 0 {
		props = append(props, DeviceProperty("IOWriteBandwidthMax", p.IOWriteBandwidthMax))
	}
	if len(p.IOWriteIOPSMax) > 0 {
		props = append(props, DeviceProperty("IOWriteIOPSMax", p.IOWriteIOPSMax))
	}
	return props
}

// Properties is the whole policy as D-Bus properties.
func (p Policy) Properties() []sd.Property {
	return append(p.execProperties(), p.CgroupProperties()...)
}

// DeviceProperty builds an a(st) property such as IOWriteBandwidthMax or
// IODeviceLatencyTargetUSec. An empty list resets the property.
func DeviceProperty(name string, vals []DeviceValue) sd.Property {
	// An unnamed struct type, so the Variant's value compares equal to what
	// godbus decodes for a(st).
	v := make([]struct {
		Path  string
		Value uint64
	}, len(vals))
	for i, d := range vals {
		v[i].Path, v[i].Value = d.Path, d.Value
	}
	return prop(name, v)
}

func prop(name string, v any) sd.Property {
	return sd.Property{Name: name, Value: dbus.MakeVariant(v)}
}

// TransientService describes the staging unit.
type TransientService struct {
	Name        string // e.g. update-agent-staging.service
	Description string
	Argv        []string
	Policy      Policy
	// KillSignal is sent on stop; SIGINT makes the rpm-ostree CLI cancel its
	// daemon-side transaction (SIGTERM would leave it running). 0 = default.
	KillSignal  int
	Environment []string
}

// Properties builds the StartTransientUnit properties. RemainAfterExit keeps
// the unit (and its Result) after a successful exit so the waiter can read
// it; the caller stops the unit afterwards to release it.
func (t TransientService) Properties() ([]sd.Property, error) {
	if !strings.HasSuffix(t.Name, ".service") {
		return nil, fmt.Errorf("transient unit %q: name must end in .service", t.Name)
	}
	if len(t.Argv) == 0 || !strings.HasPrefix(t.Argv[0], "/") {
		return nil, fmt.Errorf("transient unit %s: argv %q must start with an absolute path", t.Name, t.Argv)
	}
	if err := t.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("transient unit %s: %w", t.Name, err)
	}
	props := []sd.Property{
		sd.PropDescription(t.Description),
		sd.PropExecStart(t.Argv, true),
		sd.PropRemainAfterExit(true),
		prop("Type", "exec"),
	}
	if t.KillSignal != 0 {
		props = append(props, prop("KillSignal", int32(t.KillSignal)))
	}
	if len(t.Environment) > 0 {
		props = append(props, prop("Environment", t.Environment))
	}
	return append(props, t.Policy.Properties()...), nil
}

// DropIn renders the policy as a unit file drop-in ([Service] section).
func (p Policy) DropIn(header string) (string, error) {
	if err := p.Validate(); err != nil {
		return "", err
	}
	var b strings.Builder
	if header != "" {
		for _, l := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
			fmt.Fprintf(&b, "# %s\n", l)
		}
	}
	b.WriteString("[Service]\n")
	if p.IOSchedulingClass != "" {
		fmt.Fprintf(&b, "IOSchedulingClass=%s\n", p.IOSchedulingClass)
	}
	if p.IOSchedulingPriority != nil {
		fmt.Fprintf(&b, "IOSchedulingPriority=%d\n", *p.IOSchedulingPriority)
	}
	if p.Nice != nil {
		fmt.Fprintf(&b, "Nice=%d\n", *p.Nice)
	}
	if p.CPUWeight != "" {
		fmt.Fprintf(&b, "CPUWeight=%s\n", p.CPUWeight)
	}
	if p.IOWeight != 0 {
		fmt.Fprintf(&b, "IOWeight=%d\n", p.IOWeight)
	}
	if p.MemoryHigh != 0 {
		fmt.Fprintf(&b, "MemoryHigh=%d\n", p.MemoryHigh)
	}
	devs := append([]DeviceValue(nil), p.IOWriteBandwidthMax...)
	sort.Slice(devs, func(i, j int) bool { return devs[i].Path < devs[j].Path })
	for _, d := range devs {
		fmt.Fprintf(&b, "IOWriteBandwidthMax=%s %d\n", d.Path, d.Value)
	}
	iops := append([]DeviceValue(nil), p.IOWriteIOPSMax...)
	sort.Slice(iops, func(i, j int) bool { return iops[i].Path < iops[j].Path })
	for _, d := range iops {
		fmt.Fprintf(&b, "IOWriteIOPSMax=%s %d\n", d.Path, d.Value)
	}
	return b.String(), nil
}

// SavedProp is a cgroup property's value read from a unit, kept (as JSON in
// the state dir) to be set back after the staging window.
type SavedProp struct {
	Name string `json:"name"`
	// Uint holds a "t" value; Devices an "a(st)" list (IsDevices set, as
	// an empty list is a value too: "no entries").
	Uint      uint64        `json:"uint,omitempty"`
	Devices   []DeviceValue `json:"devices,omitempty"`
	IsDevices bool          `json:"is_devices,omitempty"`
}

// Property is the value as a D-Bus property for SetUnitProperties.
func (p SavedProp) Property() sd.Property {
	if p.IsDevices {
		return DeviceProperty(p.Name, p.Devices)
	}
	return prop(p.Name, p.Uint)
}

// SavedFrom converts a property value as go-systemd decodes it (uint64 for
// "t"; [][]any or []struct for "a(st)") into a SavedProp.
func SavedFrom(name string, v any) (SavedProp, error) {
	switch x := v.(type) {
	case uint64:
		return SavedProp{Name: name, Uint: x}, nil
	case [][]any:
		sp := SavedProp{Name: name, IsDevices: true}
		for _, e := range x {
			if len(e) != 2 {
				return sp, fmt.Errorf("property %s: entry %v is not (st)", name, e)
			}
			p, ok1 := e[0].(string)
			n, ok2 := e[1].(uint64)
			if !ok1 || !ok2 {
				return sp, fmt.Errorf("property %s: entry %v is not (st)", name, e)
			}
			sp.Devices = append(sp.Devices, DeviceValue{p, n})
		}
		return sp, nil
	case []struct {
		Path  string
		Value uint64
	}:
		sp := SavedProp{Name: name, IsDevices: true}
		for _, e := range x {
			sp.Devices = append(sp.Devices, DeviceValue(e))
		}
		return sp, nil
	}
	return SavedProp{}, fmt.Errorf("property %s: cannot keep a value of type %T", name, v)
}
