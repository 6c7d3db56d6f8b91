package systemd

import (
	"fmt"
	"strings"

	sd "github.com/coreos/go-systemd/v22/dbus"
)

// UnitStatus is what the agent needs to know about a unit.
type UnitStatus struct {
	Name         string
	LoadState    string // loaded, not-found, ...
	ActiveState  string // active, activating, failed, inactive, ...
	SubState     string // running, exited, dead, failed, ...
	FreezerState string // running, frozen, freezing, thawing
	ControlGroup string
	// Result is the service's result: success, exit-code, signal, timeout...
	Result string
	// ExecMainCode is the si_code of the main process: 1 exited, 2 killed,
	// 3 dumped; 0 when it has not exited.
	ExecMainCode   int32
	ExecMainStatus int32
}

// Finished reports whether a RemainAfterExit service's process has ended.
func (s UnitStatus) Finished() bool {
	switch {
	case s.LoadState == "not-found":
		return true
	case s.ActiveState == "failed":
		return true
	case s.ActiveState == "active" && s.SubState == "exited":
		return true
	case s.ActiveState == "inactive" && s.ExecMainCode != 0:
		return true
	}
	return false
}

// MayBeFinished says whether a unit in this state may have finished
// (UnitStatus.Finished decides, with the whole status): anything but
// running or on its way.
func (b Brief) MayBeFinished() bool {
	switch b.ActiveState {
	case "active":
		return b.SubState == "exited"
	case "activating", "deactivating", "reloading", "refreshing":
		return false
	}
	return true // failed, inactive (also a unit not loaded), maintenance
}

// Err describes a finished unit that did not succeed, nil for success.
func (s UnitStatus) Err() error {
	if s.LoadState == "not-found" {
		return fmt.Errorf("%s: %w", s.Name, ErrNoUnit)
	}
	if s.Result == "success" && s.ExecMainCode == 1 && s.ExecMainStatus == 0 {
		return nil
	}
	how := fmt.Sprintf("exit status %d", s.ExecMainStatus)
	if s.ExecMainCode == 2 || s.ExecMainCode == 3 {
		how = fmt.Sprintf("killed by signal %d", s.ExecMainStatus)
	}
	return fmt.Errorf("%s: result %s, %s", s.Name, s.Result, how)
}

// statusFromProps maps the property maps go-systemd returns for the Unit and
// Service interfaces (svc may be nil).
func statusFromProps(name string, unit, svc map[string]any) UnitStatus {
	st := UnitStatus{
		Name:         name,
		LoadState:    str(unit["LoadState"]),
		ActiveState:  str(unit["ActiveState"]),
		SubState:     str(unit["SubState"]),
		FreezerState: str(unit["FreezerState"]),
	}
	if svc != nil {
		st.ControlGroup = str(svc["ControlGroup"])
		st.Result = str(svc["Result"])
		st.ExecMainCode, _ = svc["ExecMainCode"].(int32)
		st.ExecMainStatus, _ = svc["ExecMainStatus"].(int32)
	}
	return st
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func propNames(props []sd.Property) string {
	n := make([]string, len(props))
	for i, p := range props {
		n[i] = p.Name
	}
	return strings.Join(n, ",")
}
