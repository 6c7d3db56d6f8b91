package systemd

import (
	"context"
	"fmt"
	"strings"
)

// UnitCgroup is where a service's cgroup is (its ControlGroup, relative
// to the cgroup2 root) or, while it does not run (ControlGroup empty: a
// D-Bus activated daemon that exited idle), where systemd will put it:
// its Slice= and name (SliceCgroup). "" when systemd says neither (not a
// service, not loaded).
func (c *Conn) UnitCgroup(ctx context.Context, unit string) (string, error) {
	cg, err := c.ControlGroup(ctx, unit)
	if err != nil || cg != "" || !isService(unit) {
		return cg, err
	}
	prop, err := c.c.GetServicePropertyContext(ctx, unit, "Slice")
	if err != nil {
		return "", fmt.Errorf("reading Slice of %s: %w", unit, err)
	}
	return SliceCgroup(str(prop.Value.Value()), unit), nil
}

// SliceCgroup is the cgroup (relative to the cgroup2 root) systemd gives
// unit in slice: a slice's name spells its parents ("a-b.slice" is in
// "a.slice"), "-.slice" is the root (systemd.slice(5)). "" for no slice.
func SliceCgroup(slice, unit string) string {
	name, ok := strings.CutSuffix(slice, ".slice")
	if !ok || name == "" {
		return ""
	}
	if name == "-" {
		return "/" + unit
	}
	var b strings.Builder
	for i := 0; i <= len(name); i++ {
		if i == len(name) || name[i] == '-' {
			b.WriteString("/" + name[:i] + ".slice")
		}
	}
	return b.String() + "/" + unit
}
