package systemd

import (
	"context"
	"fmt"
)

// UnitFile is what says whether a unit can run: loaded at all, enabled in
// some way, active now.
type UnitFile struct {
	Name, LoadState, UnitFileState, ActiveState string
}

// UnitFile reads unit's load, unit-file and active state. A unit that does
// not exist is LoadState "not-found", not an error.
func (c *Conn) UnitFile(ctx context.Context, unit string) (UnitFile, error) {
	u := UnitFile{Name: unit}
	for _, p := range []struct {
		name string
		to   *string
	}{{"LoadState", &u.LoadState}, {"UnitFileState", &u.UnitFileState}, {"ActiveState", &u.ActiveState}} {
		prop, err := c.c.GetUnitPropertyContext(ctx, unit, p.name)
		if err != nil {
			return UnitFile{}, fmt.Errorf("reading %s of %s: %w", p.name, unit, err)
		}
		*p.to = str(prop.Value.Value())
	}
	return u, nil
}

// MaskRuntime masks units until the next boot (`systemctl mask --runtime`)
// and stops them: a masked unit can be neither started nor triggered.
func (c *Conn) MaskRuntime(ctx context.Context, units ...string) error {
	if _, err := c.c.MaskUnitFilesContext(ctx, units, true, true); err != nil {
		return fmt.Errorf("masking %v until the next boot: %w", units, err)
	}
	if err := c.Reload(ctx); err != nil {
		return err
	}
	for _, u := range units {
		if err := c.Stop(ctx, u); err != nil {
			return err
		}
	}
	return nil
}
