package standin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Inhibitor is one logind inhibitor lock.
type Inhibitor struct {
	What string `json:"what"`
	Who  string `json:"who"`
	Why  string `json:"why"`
	Mode string `json:"mode"`
}

// checkInhibitors refuses when a shutdown inhibitor in block mode is held,
// worded as rpm-ostreed words it.
func (d *Daemon) checkInhibitors(ctx context.Context) error {
	locks, err := d.listInhibitors(ctx)
	if err != nil {
		return fmt.Errorf("Checking systemd inhibitor locks: %w", err)
	}
	var block []Inhibitor
	for _, l := range locks {
		if strings.Contains(l.What, "shutdown") && l.Mode == "block" {
			block = append(block, l)
		}
	}
	if len(block) == 0 {
		return nil
	}
	msg := fmt.Sprintf("Reboot blocked by a systemd inhibitor lock in `block` mode\nHeld by: %s\nReason: %s", block[0].Who, block[0].Why)
	if len(block) > 1 {
		msg += fmt.Sprintf("\nand %d other blocking inhibitor lock(s)\nUse `systemd-inhibit --list` to see details", len(block)-1)
	}
	return errors.New(msg)
}

// listInhibitors asks logind (through busctl, when systemd runs), or reads
// the test file that replaces it.
func (d *Daemon) listInhibitors(ctx context.Context) ([]Inhibitor, error) {
	if d.cfg.InhibitorsFile != "" {
		var l []Inhibitor
		b, err := os.ReadFile(d.cfg.InhibitorsFile)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return l, json.Unmarshal(b, &l)
	}
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		return nil, nil // no systemd, no logind, no inhibitors
	}
	res, err := d.runner.Run(ctx, "listing inhibitor locks", "busctl", "call", "--json=short",
		"org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager", "ListInhibitors")
	if err != nil {
		return nil, err
	}
	return parseBusctlInhibitors(res.Stdout)
}

// parseBusctlInhibitors reads busctl's JSON for a(ssssuu):
// {"type":"a(ssssuu)","data":[[["shutdown","who","why","block",0,1]]]}.
func parseBusctlInhibitors(b []byte) ([]Inhibitor, error) {
	var reply struct {
		Data [][][]any `json:"data"`
	}
	if err := json.Unmarshal(b, &reply); err != nil {
		return nil, fmt.Errorf("parsing ListInhibitors reply: %w", err)
	}
	if len(reply.Data) < 1 {
		return nil, errors.New("ListInhibitors returned empty tuple")
	}
	var out []Inhibitor
	for _, e := range reply.Data[0] {
		if len(e) < 4 {
			continue
		}
		s := func(i int) string { v, _ := e[i].(string); return v }
		out = append(out, Inhibitor{What: s(0), Who: s(1), Why: s(2), Mode: s(3)})
	}
	return out, nil
}
