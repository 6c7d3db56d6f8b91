package systemd

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
)

// Conn is a connection to the system manager. Methods are thin: they send
// what the pure builders made and wrap errors with the unit name.
type Conn struct {
	c *sd.Conn
	// Poll is how often Wait reads a unit's state when it cannot wait on
	// the unit's cgroup; CgroupRoot is where cgroup2 is mounted ("" =
	// /sys/fs/cgroup).
	Poll       time.Duration
	CgroupRoot string
}

// Dial connects to systemd on the system bus.
func Dial(ctx context.Context) (*Conn, error) {
	c, err := sd.NewSystemConnectionContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd: %w", err)
	}
	return &Conn{c: c, Poll: time.Second}, nil
}

// Close closes the bus connection.
func (c *Conn) Close() { c.c.Close() }

// jobDone waits for a job result sent by go-systemd.
func jobDone(ctx context.Context, what string, ch <-chan string) error {
	select {
	case r := <-ch:
		if r != "done" {
			return fmt.Errorf("%s: job %s", what, r)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", what, context.Cause(ctx))
	}
}

// StartTransient creates and starts the transient service t and returns once
// its start job is done (Type=exec: the command has been executed).
func (c *Conn) StartTransient(ctx context.Context, t TransientService) error {
	props, err := t.Properties()
	if err != nil {
		return err
	}
	// A failed unit of the same name from an earlier run would block the
	// name; resetting it is harmless when there is none.
	_ = c.c.ResetFailedUnitContext(ctx, t.Name)
	ch := make(chan string, 1)
	if _, err := c.c.StartTransientUnitContext(ctx, t.Name, "fail", props, ch); err != nil {
		return fmt.Errorf("starting transient unit %s: %w", t.Name, err)
	}
	return jobDone(ctx, "starting transient unit "+t.Name, ch)
}

// Stop stops unit and waits for the stop job.
func (c *Conn) Stop(ctx context.Context, unit string) error {
	ch := make(chan string, 1)
	if _, err := c.c.StopUnitContext(ctx, unit, "replace", ch); err != nil {
		return fmt.Errorf("stopping %s: %w", unit, err)
	}
	return jobDone(ctx, "stopping "+unit, ch)
}

// Restart restarts unit and waits for the job.
func (c *Conn) Restart(ctx context.Context, unit string) error {
	ch := make(chan string, 1)
	if _, err := c.c.RestartUnitContext(ctx, unit, "replace", ch); err != nil {
		return fmt.Errorf("restarting %s: %w", unit, err)
	}
	return jobDone(ctx, "restarting "+unit, ch)
}

// ResetFailed clears a failed unit so it is garbage-collected.
func (c *Conn) ResetFailed(ctx context.Context, unit string) error {
	if err := c.c.ResetFailedUnitContext(ctx, unit); err != nil {
		return fmt.Errorf("resetting failed state of %s: %w", unit, err)
	}
	return nil
}

// Freeze freezes unit's cgroup (cgroup v2 cgroup.freeze).
func (c *Conn) Freeze(ctx context.Context, unit string) error {
	if err := c.c.FreezeUnit(ctx, unit); err != nil {
		return fmt.Errorf("freezing %s: %w", unit, err)
	}
	return nil
}

// Thaw thaws unit's cgroup.
func (c *Conn) Thaw(ctx context.Context, unit string) error {
	if err := c.c.ThawUnit(ctx, unit); err != nil {
		return fmt.Errorf("thawing %s: %w", unit, err)
	}
	return nil
}

// Reload is systemctl daemon-reload.
func (c *Conn) Reload(ctx context.Context) error {
	if err := c.c.ReloadContext(ctx); err != nil {
		return fmt.Errorf("reloading systemd: %w", err)
	}
	return nil
}

// SetRuntime sets properties on a unit until the next reboot (systemd
// writes them to /run/systemd/system.control/<unit>.d/50-<name>.conf).
func (c *Conn) SetRuntime(ctx context.Context, unit string, props ...sd.Property) error {
	if err := c.c.SetUnitPropertiesContext(ctx, unit, true, props...); err != nil {
		return fmt.Errorf("setting %s on %s: %w", propNames(props), unit, err)
	}
	return nil
}

// Save reads the current values of the named cgroup properties of a
// service, to be set back later.
func (c *Conn) Save(ctx context.Context, unit string, names ...string) ([]SavedProp, error) {
	m, err := c.c.GetUnitTypePropertiesContext(ctx, unit, "Service")
	if err != nil {
		return nil, fmt.Errorf("reading properties of %s: %w", unit, err)
	}
	var out []SavedProp
	for _, n := range names {
		v, ok := m[n]
		if !ok {
			return nil, fmt.Errorf("reading properties of %s: no property %s", unit, n)
		}
		sp, err := SavedFrom(n, v)
		if err != nil {
			return nil, fmt.Errorf("reading properties of %s: %w", unit, err)
		}
		out = append(out, sp)
	}
	return out, nil
}

// Status reads unit's state.
func (c *Conn) Status(ctx context.Context, unit string) (UnitStatus, error) {
	u, err := c.c.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return UnitStatus{}, fmt.Errorf("reading state of %s: %w", unit, err)
	}
	var s map[string]any
	if isService(unit) {
		if s, err = c.c.GetUnitTypePropertiesContext(ctx, unit, "Service"); err != nil {
			return UnitStatus{}, fmt.Errorf("reading service state of %s: %w", unit, err)
		}
	}
	return statusFromProps(unit, u, s), nil
}

// Brief is what a poll needs of a unit's state: far cheaper than Status,
// which reads every property of the unit and its service (two GetAll
// calls of some 400 properties, decoded by reflection). Polled during a
// staging, full reads cost stage-once a quarter of a CPU in the TCG guest
// beside etcd (bench: 104 s of CPU over a 442 s staging, guard off).
type Brief struct {
	ActiveState, SubState string
}

// Brief reads ActiveState and SubState.
func (c *Conn) Brief(ctx context.Context, unit string) (Brief, error) {
	var b Brief
	for _, p := range []struct {
		name string
		to   *string
	}{{"ActiveState", &b.ActiveState}, {"SubState", &b.SubState}} {
		prop, err := c.c.GetUnitPropertyContext(ctx, unit, p.name)
		if err != nil {
			return Brief{}, fmt.Errorf("reading %s of %s: %w", p.name, unit, err)
		}
		*p.to = str(prop.Value.Value())
	}
	return b, nil
}

func isService(unit string) bool { return len(unit) > 8 && unit[len(unit)-8:] == ".service" }

// ControlGroup returns a service's cgroup path relative to the cgroup2
// root ("/system.slice/x.service"), "" when it has none (not running, or
// not a service).
func (c *Conn) ControlGroup(ctx context.Context, unit string) (string, error) {
	if !isService(unit) {
		return "", nil
	}
	prop, err := c.c.GetServicePropertyContext(ctx, unit, "ControlGroup")
	if err != nil {
		return "", fmt.Errorf("reading ControlGroup of %s: %w", unit, err)
	}
	return str(prop.Value.Value()), nil
}

// Wait waits until unit has finished (exited with RemainAfterExit,
// failed, or gone) and returns how it ended. While the unit's processes
// run it sleeps on its cgroup's cgroup.events (WatchFallback at most, in
// case a change is missed); from then on, or when the cgroup cannot be
// watched, it polls the unit's Brief every Poll. It reads the whole
// status only once Brief says the unit may have finished.
func (c *Conn) Wait(ctx context.Context, unit string) (UnitStatus, error) {
	poll := c.Poll
	if poll <= 0 {
		poll = time.Second
	}
	w := c.watchUnit(ctx, unit)
	if w != nil {
		defer w.Close()
	}
	for {
		b, err := c.Brief(ctx, unit)
		if err != nil {
			return UnitStatus{Name: unit}, err
		}
		if b.MayBeFinished() {
			st, err := c.Status(ctx, unit)
			if err != nil {
				return st, err
			}
			if st.Finished() {
				return st, nil
			}
		}
		// Once the cgroup is empty systemd has yet to notice: poll.
		if populated, err := w.populated(); err == nil && populated {
			w.Next(ctx, WatchFallback)
		} else {
			select {
			case <-ctx.Done():
			case <-time.After(poll):
			}
		}
		if ctx.Err() != nil {
			return UnitStatus{Name: unit, ActiveState: b.ActiveState, SubState: b.SubState}, fmt.Errorf("waiting for %s: %w", unit, context.Cause(ctx))
		}
	}
}

// WatchFallback bounds a wait on a unit's cgroup.events between two looks
// at the unit.
const WatchFallback = 30 * time.Second

// watchUnit watches unit's cgroup, nil when it cannot (no cgroup yet, no
// inotify): Wait then polls.
func (c *Conn) watchUnit(ctx context.Context, unit string) *cgroupWatch {
	cg, err := c.ControlGroup(ctx, unit)
	if err != nil || cg == "" {
		return nil
	}
	root := c.CgroupRoot
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	w, err := watchCgroup(filepath.Join(root, cg))
	if err != nil {
		return nil
	}
	return w
}

// ErrNoUnit is wrapped when a unit is not loaded.
var ErrNoUnit = errors.New("unit not loaded")
