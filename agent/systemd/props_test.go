package systemd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	sd "github.com/coreos/go-systemd/v22/dbus"
)

func intp(v int) *int { return &v }

// wire is a property as it goes on the bus: name, D-Bus signature, value.
type wire struct {
	name, sig string
	val       any
}

func wireOf(props []sd.Property) []wire {
	out := make([]wire, len(props))
	for i, p := range props {
		out[i] = wire{p.Name, p.Value.Signature().String(), p.Value.Value()}
	}
	return out
}

func TestPolicyProperties(t *testing.T) {
	type st = struct {
		Path  string
		Value uint64
	}
	tests := []struct {
		name string
		p    Policy
		want []wire
	}{
		{"empty policy sets nothing", Policy{}, []wire{}},
		{
			"idle everything",
			Policy{IOSchedulingClass: "idle", IOSchedulingPriority: intp(7), Nice: intp(19), CPUWeight: "idle", IOWeight: 10, MemoryHigh: 256 << 20},
			[]wire{
				{"IOSchedulingClass", "i", int32(3)},
				{"IOSchedulingPriority", "i", int32(7)},
				{"Nice", "i", int32(19)},
				{"CPUWeight", "t", uint64(0)}, // CGROUP_WEIGHT_IDLE
				{"IOWeight", "t", uint64(10)},
				{"MemoryHigh", "t", uint64(256 << 20)},
			},
		},
		{
			"numeric cpu weight, best-effort, priority 0 and nice 0 are set",
			Policy{IOSchedulingClass: "best-effort", IOSchedulingPriority: intp(0), Nice: intp(0), CPUWeight: "20"},
			[]wire{
				{"IOSchedulingClass", "i", int32(2)},
				{"IOSchedulingPriority", "i", int32(0)},
				{"Nice", "i", int32(0)},
				{"CPUWeight", "t", uint64(20)},
			},
		},
		{
			"realtime and write bandwidth",
			Policy{IOSchedulingClass: "realtime", IOWriteBandwidthMax: []DeviceValue{{"/dev/vdb", 5000000}, {"/var", 1}}},
			[]wire{
				{"IOSchedulingClass", "i", int32(1)},
				{"IOWriteBandwidthMax", "a(st)", []st{{"/dev/vdb", 5000000}, {"/var", 1}}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.p.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			got := wireOf(tc.p.Properties())
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		p       Policy
		wantErr string
	}{
		{Policy{IOSchedulingClass: "lazy"}, "IOSchedulingClass"},
		{Policy{IOSchedulingPriority: intp(8)}, "IOSchedulingPriority"},
		{Policy{Nice: intp(20)}, "Nice"},
		{Policy{CPUWeight: "0"}, "CPUWeight"},
		{Policy{CPUWeight: "10001"}, "CPUWeight"},
		{Policy{CPUWeight: "low"}, "CPUWeight"},
		{Policy{IOWeight: 10001}, "IOWeight"},
		{Policy{IOWriteBandwidthMax: []DeviceValue{{"/dev/vdb", 0}}}, "IOWriteBandwidthMax"},
		{Policy{CPUWeight: "10000", IOWeight: 1, Nice: intp(-20)}, ""},
	}
	for _, tc := range tests {
		err := tc.p.Validate()
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%+v: unexpected %v", tc.p, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%+v: got %v, want error naming %s", tc.p, err, tc.wantErr)
		}
	}
}

func TestDeviceProperty(t *testing.T) {
	p := DeviceProperty("IODeviceLatencyTargetUSec", []DeviceValue{{"/dev/vdb", 25000}})
	if got := p.Value.Signature().String(); got != "a(st)" {
		t.Errorf("signature %s, want a(st)", got)
	}
	empty := DeviceProperty("IODeviceLatencyTargetUSec", nil)
	if got := empty.Value.Signature().String(); got != "a(st)" {
		t.Errorf("empty list signature %s, want a(st)", got)
	}
	if n := reflect.ValueOf(empty.Value.Value()).Len(); n != 0 {
		t.Errorf("empty list has %d entries", n)
	}
}

func TestTransientServiceProperties(t *testing.T) {
	ts := TransientService{
		Name:        "update-agent-staging.service",
		Description: "stage",
		Argv:        []string{"/usr/bin/rpm-ostree", "upgrade", "--lock-finalization"},
		KillSignal:  2,
		Policy:      Policy{IOSchedulingClass: "idle", IOWeight: 10},
	}
	props, err := ts.Properties()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]wire{}
	for _, w := range wireOf(props) {
		got[w.name] = w
	}
	want := map[string]string{
		"Description": "s", "ExecStart": "a(sasb)", "RemainAfterExit": "b", "Type": "s",
		"KillSignal": "i", "IOSchedulingClass": "i", "IOWeight": "t",
	}
	if len(got) != len(want) {
		t.Errorf("got properties %v, want %v", got, want)
	}
	for n, sig := range want {
		if got[n].sig != sig {
			t.Errorf("%s: signature %q, want %q", n, got[n].sig, sig)
		}
	}
	if got["KillSignal"].val != int32(2) || got["RemainAfterExit"].val != true || got["Type"].val != "exec" {
		t.Errorf("values: %v", got)
	}
	exec := fmt.Sprint(got["ExecStart"].val)
	if !strings.Contains(exec, "/usr/bin/rpm-ostree [/usr/bin/rpm-ostree upgrade --lock-finalization]") {
		t.Errorf("ExecStart = %s", exec)
	}

	for _, bad := range []TransientService{
		{Name: "x.scope", Argv: []string{"/bin/true"}},
		{Name: "x.service", Argv: []string{"true"}},
		{Name: "x.service"},
		{Name: "x.service", Argv: []string{"/bin/true"}, Policy: Policy{IOWeight: 20000}},
	} {
		if _, err := bad.Properties(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestDropIn(t *testing.T) {
	p := Policy{IOSchedulingClass: "idle", Nice: intp(10), CPUWeight: "idle", IOWeight: 10, MemoryHigh: 1 << 30,
		IOWriteBandwidthMax: []DeviceValue{{"/dev/vdc", 2}, {"/dev/vdb", 1}}, IOWriteIOPSMax: []DeviceValue{{"/dev/vdc", 4}, {"/dev/vdb", 3}}}
	got, err := p.DropIn("written by update-agent\nremoved after staging")
	if err != nil {
		t.Fatal(err)
	}
	want := `# written by update-agent
# removed after staging
[Service]
IOSchedulingClass=idle
Nice=10
CPUWeight=idle
IOWeight=10
MemoryHigh=1073741824
IOWriteBandwidthMax=/dev/vdb 1
IOWriteBandwidthMax=/dev/vdc 2
IOWriteIOPSMax=/dev/vdb 3
IOWriteIOPSMax=/dev/vdc 4
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := (Policy{CPUWeight: "x"}).DropIn(""); err == nil {
		t.Error("bad policy rendered")
	}
}

func TestWriteRemoveDropIn(t *testing.T) {
	dir := t.TempDir()
	p, err := WriteDropIn(dir, "rpm-ostreed.service", "50-update-agent.conf", "[Service]\nIOWeight=10\n")
	if err != nil {
		t.Fatal(err)
	}
	if p != filepath.Join(dir, "rpm-ostreed.service.d", "50-update-agent.conf") {
		t.Errorf("path %s", p)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "[Service]\nIOWeight=10\n" {
		t.Fatalf("read %q %v", b, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(p)); len(ents) != 1 {
		t.Errorf("temp files left: %v", ents)
	}
	removed, err := RemoveDropIn(p)
	if err != nil || !removed {
		t.Fatalf("remove: %v %v", removed, err)
	}
	if _, err := os.Stat(filepath.Dir(p)); !os.IsNotExist(err) {
		t.Errorf("empty drop-in dir left: %v", err)
	}
	if removed, err := RemoveDropIn(p); err != nil || removed {
		t.Errorf("second remove: %v %v", removed, err)
	}
	if _, err := WriteDropIn(dir, "../x", "a.conf", ""); err == nil {
		t.Error("unit name with / accepted")
	}
	if got := ControlFile("/run/systemd/system.control", "etcd.service", "IODeviceLatencyTargetUSec"); got != "/run/systemd/system.control/etcd.service.d/50-IODeviceLatencyTargetUSec.conf" {
		t.Errorf("ControlFile = %s", got)
	}
}

func TestStatus(t *testing.T) {
	tests := []struct {
		name      string
		unit, svc map[string]any
		finished  bool
		errText   string
	}{
		{"running", map[string]any{"LoadState": "loaded", "ActiveState": "active", "SubState": "running"},
			map[string]any{"Result": "success", "ExecMainCode": int32(0)}, false, ""},
		{"exited ok", map[string]any{"LoadState": "loaded", "ActiveState": "active", "SubState": "exited"},
			map[string]any{"Result": "success", "ExecMainCode": int32(1), "ExecMainStatus": int32(0), "ControlGroup": "/system.slice/x.service"}, true, ""},
		{"exit code", map[string]any{"LoadState": "loaded", "ActiveState": "failed", "SubState": "failed"},
			map[string]any{"Result": "exit-code", "ExecMainCode": int32(1), "ExecMainStatus": int32(3)}, true, "result exit-code, exit status 3"},
		{"killed", map[string]any{"LoadState": "loaded", "ActiveState": "failed", "SubState": "failed"},
			map[string]any{"Result": "signal", "ExecMainCode": int32(2), "ExecMainStatus": int32(9)}, true, "killed by signal 9"},
		{"gone", map[string]any{"LoadState": "not-found", "ActiveState": "inactive"}, map[string]any{}, true, "not loaded"},
		{"starting", map[string]any{"LoadState": "loaded", "ActiveState": "activating", "SubState": "start"}, map[string]any{}, false, ""},
	}
	for _, tc := range tests {
		s := statusFromProps("x.service", tc.unit, tc.svc)
		if s.Finished() != tc.finished {
			t.Errorf("%s: Finished=%v", tc.name, s.Finished())
		}
		// Wait reads the whole status only when the brief one says the
		// unit may have finished: that must hold for every finished state.
		b := Brief{ActiveState: s.ActiveState, SubState: s.SubState}
		if b.MayBeFinished() != tc.finished {
			t.Errorf("%s: MayBeFinished=%v, Finished=%v", tc.name, b.MayBeFinished(), tc.finished)
		}
		if !tc.finished {
			continue
		}
		err := s.Err()
		if tc.errText == "" && err != nil || tc.errText != "" && (err == nil || !strings.Contains(err.Error(), tc.errText)) {
			t.Errorf("%s: Err()=%v, want %q", tc.name, err, tc.errText)
		}
	}
	if s := statusFromProps("x.service", map[string]any{}, map[string]any{"ControlGroup": "/system.slice/x.service"}); s.ControlGroup != "/system.slice/x.service" {
		t.Errorf("ControlGroup %q", s.ControlGroup)
	}
}

func TestSavedProp(t *testing.T) {
	tests := []struct {
		in      any
		wantSig string
		wantVal string
	}{
		{uint64(100), "t", "100"},
		{^uint64(0), "t", "18446744073709551615"},
		{[][]any{{"/dev/vdb", uint64(25000)}}, "a(st)", "[{/dev/vdb 25000}]"},
		{[][]any{}, "a(st)", "[]"},
		{[]struct {
			Path  string
			Value uint64
		}{{"/dev/vda", 1}}, "a(st)", "[{/dev/vda 1}]"},
	}
	for _, tc := range tests {
		sp, err := SavedFrom("X", tc.in)
		if err != nil {
			t.Fatalf("%v: %v", tc.in, err)
		}
		// Through JSON, as it is kept in the state dir.
		b, _ := json.Marshal(sp)
		var back SavedProp
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		p := back.Property()
		if p.Name != "X" || p.Value.Signature().String() != tc.wantSig || fmt.Sprint(p.Value.Value()) != tc.wantVal {
			t.Errorf("%v: got %s %s %v (json %s)", tc.in, p.Name, p.Value.Signature(), p.Value.Value(), b)
		}
	}
	for _, bad := range []any{"x", [][]any{{"/dev/vdb"}}, [][]any{{1, 2}}} {
		if _, err := SavedFrom("X", bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
