package config

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// FleetLock is the FleetLock server (package fleetlock) through which
// zincati nodes take slots of the same semaphore as the agents. Off while
// Listen is "".
type FleetLock struct {
	// Listen is "host:port"; "" serves nothing.
	Listen string `toml:"listen"`
	// CertFile and KeyFile serve HTTPS; "" serves plain HTTP.
	CertFile string `toml:"cert_file"`
	KeyFile  string `toml:"key_file"`
	// ClientCAFile, when set, requires client certificates signed by it.
	ClientCAFile string `toml:"client_ca_file"`
	// MaxHold bounds how long a FleetLock client holds a slot without
	// reporting steady-state.
	MaxHold Duration `toml:"max_hold"`
	// MaxWaiters bounds the FleetLock clients waiting in the group: a new
	// client beyond it is refused before any etcd lease is made. 0: no
	// bound.
	MaxWaiters int `toml:"max_waiters"`
	// AllowIDs and AllowNetworks, when not empty, are the only client ids
	// and peer address ranges (CIDRs) of the served group (lock.group)
	// that may queue.
	AllowIDs      []string `toml:"allow_ids"`
	AllowNetworks []string `toml:"allow_networks"`
}

// Networks parses AllowNetworks (validated at load).
func (f FleetLock) Networks() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, n := range f.AllowNetworks {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return nil, fmt.Errorf("fleetlock.allow_networks: %w", err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func (k *checker) fleetLock(f *FleetLock) {
	k.positive("fleetlock.max_hold", f.MaxHold)
	if f.MaxWaiters < 0 {
		k.fail("fleetlock.max_waiters", "must be >= 0 (0: no bound), got %d", f.MaxWaiters)
	}
	for _, id := range f.AllowIDs {
		if id == "" || len(id) > 253 || strings.ContainsAny(id, "/ \t\n") {
			k.fail("fleetlock.allow_ids", "%q is not a FleetLock client id (printable, no spaces or '/')", id)
		}
	}
	for _, n := range f.AllowNetworks {
		if _, err := netip.ParsePrefix(n); err != nil {
			k.fail("fleetlock.allow_networks", "%q is not a CIDR like \"10.0.0.0/24\": %v", n, err)
		}
	}
	if f.Listen != "" {
		host, port, err := net.SplitHostPort(f.Listen)
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil || n < 1 || n > 65535 || strings.ContainsAny(host, "/ ") {
			k.fail("fleetlock.listen", "must be \"host:port\" or \"\" (off), got %q", f.Listen)
		}
		if len(k.c.Etcd.Endpoints) == 0 {
			k.failRel("etcd.endpoints", []string{"fleetlock.listen"}, "at least one endpoint is needed while fleetlock.listen is set")
		}
	}
	ok := map[string]bool{}
	for _, fl := range []struct{ key, path string }{
		{"fleetlock.cert_file", f.CertFile}, {"fleetlock.key_file", f.KeyFile}, {"fleetlock.client_ca_file", f.ClientCAFile},
	} {
		if fl.path != "" {
			ok[fl.key] = k.readable(fl.key, fl.path)
		}
	}
	k.pemFiles(ok, tlsKey{"fleetlock.client_ca_file", f.ClientCAFile}, tlsKey{"fleetlock.cert_file", f.CertFile}, tlsKey{"fleetlock.key_file", f.KeyFile})
	if (f.CertFile == "") != (f.KeyFile == "") {
		k.failRel("fleetlock.key_file", []string{"fleetlock.cert_file"}, "fleetlock.cert_file and fleetlock.key_file must be set together")
	}
	if f.ClientCAFile != "" && f.CertFile == "" {
		k.failRel("fleetlock.client_ca_file", []string{"fleetlock.cert_file"}, "client certificates need TLS: set fleetlock.cert_file and fleetlock.key_file")
	}
}
