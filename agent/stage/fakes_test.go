package stage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/update-agent/update-agent/agent/iosched"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/systemd"
)

// fakeUnit is a unit as the fake systemd keeps it.
type fakeUnit struct {
	active, sub string
	frozen      bool
	props       map[string]systemd.SavedProp
	started     *systemd.TransientService
}

// fakeSystemd behaves like systemd at the D-Bus boundary: units with
// states, runtime properties written to control files, freezing.
type fakeSystemd struct {
	mu         sync.Mutex
	controlDir string
	units      map[string]*fakeUnit
	calls      []string
	// finish decides how the staging unit ends: called by Wait; it may
	// block (until ctx is done) to simulate a long staging.
	finish func(ctx context.Context) (systemd.UnitStatus, error)
	// onStart, when set, runs once a transient unit has started (what
	// the kernel shows changing once staging runs).
	onStart   func(unit string)
	failOn    map[string]error // "Restart rpm-ostreed.service" -> error
	reloads   int
	lookups   map[string]int // Brief and ControlGroup reads by unit
	fullReads map[string]int // Status reads by unit
}

func newFakeSystemd(controlDir string) *fakeSystemd {
	return &fakeSystemd{controlDir: controlDir, units: map[string]*fakeUnit{}, failOn: map[string]error{}}
}

func (f *fakeSystemd) call(format string, a ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := fmt.Sprintf(format, a...)
	f.calls = append(f.calls, c)
	return f.failOn[c]
}

func (f *fakeSystemd) unit(name string) *fakeUnit {
	u, ok := f.units[name]
	if !ok {
		u = &fakeUnit{active: "inactive", sub: "dead", props: map[string]systemd.SavedProp{}}
		f.units[name] = u
	}
	return u
}

func (f *fakeSystemd) StartTransient(_ context.Context, t systemd.TransientService) error {
	if err := f.call("StartTransient %s", t.Name); err != nil {
		return err
	}
	if _, err := t.Properties(); err != nil {
		return err
	}
	f.mu.Lock()
	u := f.unit(t.Name)
	if u.active == "active" {
		f.mu.Unlock()
		return fmt.Errorf("unit %s already exists", t.Name)
	}
	u.active, u.sub, u.started = "active", "running", &t
	f.mu.Unlock()
	if f.onStart != nil {
		f.onStart(t.Name)
	}
	return nil
}

func (f *fakeSystemd) Wait(ctx context.Context, unit string) (systemd.UnitStatus, error) {
	f.call("Wait %s", unit)
	st, err := f.finish(ctx)
	if err != nil {
		return st, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.unit(unit)
	u.active, u.sub = st.ActiveState, st.SubState
	st.Name, st.LoadState = unit, "loaded"
	return st, nil
}

// Status is the full read (some 400 properties on systemd): counted in
// fullReads, as pollers must not use it.
func (f *fakeSystemd) Status(ctx context.Context, unit string) (systemd.UnitStatus, error) {
	f.mu.Lock()
	if f.fullReads == nil {
		f.fullReads = map[string]int{}
	}
	f.fullReads[unit]++
	f.mu.Unlock()
	return f.status(ctx, unit)
}

func (f *fakeSystemd) status(_ context.Context, unit string) (systemd.UnitStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.units[unit]
	if !ok {
		return systemd.UnitStatus{Name: unit, LoadState: "not-found", ActiveState: "inactive"}, nil
	}
	fs := "running"
	if u.frozen {
		fs = "frozen"
	}
	cg := ""
	if u.active == "active" {
		cg = "/system.slice/" + unit
	}
	return systemd.UnitStatus{Name: unit, LoadState: "loaded", ActiveState: u.active, SubState: u.sub, FreezerState: fs, ControlGroup: cg}, nil
}

func (f *fakeSystemd) Brief(ctx context.Context, unit string) (systemd.Brief, error) {
	f.lookup(unit)
	st, err := f.status(ctx, unit)
	return systemd.Brief{ActiveState: st.ActiveState, SubState: st.SubState}, err
}

func (f *fakeSystemd) lookup(unit string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lookups == nil {
		f.lookups = map[string]int{}
	}
	f.lookups[unit]++
}

func (f *fakeSystemd) ControlGroup(ctx context.Context, unit string) (string, error) {
	f.lookup(unit)
	st, err := f.status(ctx, unit)
	return st.ControlGroup, err
}

func (f *fakeSystemd) Stop(_ context.Context, unit string) error {
	if err := f.call("Stop %s", unit); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, ok := f.units[unit]; ok && u.started != nil {
		delete(f.units, unit) // a transient unit is gone once stopped
	} else if ok {
		u.active, u.sub = "inactive", "dead"
	}
	return nil
}

func (f *fakeSystemd) Restart(_ context.Context, unit string) error {
	if err := f.call("Restart %s", unit); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.unit(unit)
	u.active, u.sub = "active", "running"
	return nil
}

func (f *fakeSystemd) ResetFailed(_ context.Context, unit string) error {
	f.call("ResetFailed %s", unit)
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, ok := f.units[unit]; ok && u.active == "failed" {
		delete(f.units, unit)
	}
	return nil
}

func (f *fakeSystemd) Reload(context.Context) error {
	if err := f.call("Reload"); err != nil {
		return err
	}
	f.mu.Lock()
	f.reloads++
	f.mu.Unlock()
	return nil
}

func (f *fakeSystemd) Save(_ context.Context, unit string, names ...string) ([]systemd.SavedProp, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.units[unit]
	if !ok {
		return nil, fmt.Errorf("Unit %s not loaded", unit)
	}
	var out []systemd.SavedProp
	for _, n := range names {
		p, ok := u.props[n]
		if !ok {
			// systemd's "not set" values.
			p = systemd.SavedProp{Name: n, Uint: ^uint64(0)}
			if strings.HasPrefix(n, "IODevice") || strings.HasSuffix(n, "BandwidthMax") || strings.HasSuffix(n, "IOPSMax") {
				p = systemd.SavedProp{Name: n, IsDevices: true}
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func (f *fakeSystemd) SetRuntime(_ context.Context, unit string, props ...sd.Property) error {
	names := make([]string, len(props))
	for i, p := range props {
		names[i] = p.Name
	}
	if err := f.call("SetRuntime %s %s", unit, strings.Join(names, ",")); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.units[unit]
	if !ok {
		return fmt.Errorf("Unit %s not loaded", unit)
	}
	for _, p := range props {
		sp, err := systemd.SavedFrom(p.Name, p.Value.Value())
		if err != nil {
			return err
		}
		u.props[p.Name] = sp
		// As systemd does for runtime=true.
		cf := systemd.ControlFile(f.controlDir, unit, p.Name)
		os.MkdirAll(filepath.Dir(cf), 0o755)
		os.WriteFile(cf, []byte(fmt.Sprintf("[Service]\n%s=%v\n", p.Name, p.Value.Value())), 0o644)
	}
	return nil
}

func (f *fakeSystemd) Freeze(_ context.Context, unit string) error {
	f.call("Freeze %s", unit)
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.units[unit]
	if !ok || u.active != "active" {
		return fmt.Errorf("unit %s is not active", unit)
	}
	u.frozen = true
	return nil
}

func (f *fakeSystemd) Thaw(_ context.Context, unit string) error {
	f.call("Thaw %s", unit)
	f.mu.Lock()
	defer f.mu.Unlock()
	u, ok := f.units[unit]
	if !ok || u.active != "active" {
		return fmt.Errorf("unit %s is not active", unit)
	}
	u.frozen = false
	return nil
}

func (f *fakeSystemd) called(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// fakeScheduler stands in for agent/iosched.
type fakeScheduler struct {
	mu         sync.Mutex
	applied    []string
	restores   int
	applyErr   error
	restoreErr error
	fs         []iosched.Filesystem // every path is on fs[0]; none: XFS
}

func (f *fakeScheduler) Filesystems(paths []string) ([]iosched.Filesystem, error) {
	var out []iosched.Filesystem
	for _, p := range paths {
		fs := iosched.Filesystem{Path: p, MountPoint: "/", Type: "xfs"}
		if len(f.fs) > 0 {
			fs = f.fs[0]
			fs.Path = p
		}
		out = append(out, fs)
	}
	return out, nil
}

func (f *fakeScheduler) Disks(paths []string) ([]string, error) {
	if len(paths) == 1 && paths[0] == "/nodisk" {
		return nil, errors.New("finding the disk behind /nodisk: no block device")
	}
	return []string{"vdb"}, nil
}

func (f *fakeScheduler) Apply(_ context.Context, disks []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = disks // recorded before failing, as iosched records first
	return f.applyErr
}

func (f *fakeScheduler) Restore() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.restoreErr != nil {
		return f.restoreErr
	}
	if f.applied != nil {
		f.restores++
	}
	f.applied = nil
	return nil
}

// fakeOstree keeps a repo config in memory and answers `ostree config`
// the way ostree does.
type fakeOstree struct {
	mu      sync.Mutex
	conf    map[string]string
	argvs   [][]string
	failSet bool
}

func (f *fakeOstree) Run(_ context.Context, _ string, argv ...string) (oplog.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.argvs = append(f.argvs, argv)
	res := oplog.Result{Argv: argv}
	if len(argv) < 5 || argv[1] != "config" || !strings.HasPrefix(argv[2], "--repo=") {
		return res, &oplog.Error{Argv: argv, ExitCode: 1, Stderr: "unexpected command"}
	}
	key := argv[4]
	switch argv[3] {
	case "get":
		v, ok := f.conf[key]
		if !ok {
			res.Stderr = []byte("error: Key file does not have key “per-object-fsync” in group “core”\n")
			return res, &oplog.Error{Argv: argv, ExitCode: 1, Stderr: string(res.Stderr)}
		}
		res.Stdout = []byte(v + "\n")
	case "set":
		if f.failSet {
			return res, &oplog.Error{Argv: argv, ExitCode: 1, Stderr: "error: permission denied"}
		}
		f.conf[key] = argv[5]
	case "unset":
		delete(f.conf, key)
	}
	return res, nil
}

type fakeDaemon struct{ idle bool }

func (f fakeDaemon) Idle(context.Context) (bool, error) { return f.idle, nil }
