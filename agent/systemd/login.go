package systemd

import (
	"context"
	"fmt"

	"github.com/coreos/go-systemd/v22/login1"
)

// UserSessions counts logind's interactive sessions (class "user": ssh,
// console), which a reboot would cut; cron and other background sessions
// do not count.
func UserSessions(ctx context.Context) (int, error) {
	c, err := login1.New()
	if err != nil {
		return 0, fmt.Errorf("connecting to logind: %w", err)
	}
	defer c.Close()
	sessions, err := c.ListSessionsContext(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing logind sessions: %w", err)
	}
	n := 0
	for _, s := range sessions {
		v, err := c.GetSessionPropertyContext(ctx, s.Path, "Class")
		if err != nil {
			continue // the session ended meanwhile
		}
		if class, _ := v.Value().(string); class == "user" {
			n++
		}
	}
	return n, nil
}

// BootComplete reports whether boot-complete.target is active: systemd's
// verdict that this boot is good (every unit ordered before it, such as
// health checks, succeeded), which zincati waits for too.
func (c *Conn) BootComplete(ctx context.Context) (bool, error) {
	st, err := c.Status(ctx, "boot-complete.target")
	if err != nil {
		return false, err
	}
	return st.ActiveState == "active", nil
}
