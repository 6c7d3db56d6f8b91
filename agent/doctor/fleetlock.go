package doctor

import (
	"context"
	"errors"
	"fmt"

	"github.com/update-agent/update-agent/agent/fleetlock"
)

// fleetLock fails for plain HTTP on an address other hosts reach: anyone
// there can read and forge FleetLock requests, and a slot is bound only to
// the peer address that took it.
func (d Doctor) fleetLock(context.Context) (string, error) {
	l := d.In.FleetLockListen
	switch {
	case d.In.FleetLockTLS:
		return fmt.Sprintf("serving HTTPS on %s", l), nil
	case fleetlock.Loopback(l):
		return fmt.Sprintf("serving plain HTTP on loopback %s only", l), nil
	}
	return "", errors.New("fleetlock.listen = " + l + " serves plain HTTP to other hosts: requests can be read and " +
		"forged on the network; set fleetlock.cert_file and key_file (workers trust its CA) and fleetlock.allow_networks " +
		"(the workers' addresses), or listen on loopback")
}
