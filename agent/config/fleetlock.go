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
	// Proxies are addresses of proxies (or NAT) in front of the server
	// that run on etcd member hosts: the member check does not take a
	// request from one for that member's own (it would refuse every
	// worker behind it). Their clients are then told apart by id alone.
	Proxies []string `toml:"proxies"`
	// ServeLocalMember lets this host's own zincati, on an etcd member's
	// host, take the member's slots through this server (loopback, its
	// zincati id only) with the agents' leader rule and quorum check; off,
	// a member is refused as any.
	ServeLocalMember bool `toml:"serve_local_member"`
	// Groups are groups of zincati clients only, served besides
	// lock.group, each with its slots: workers that keep zincati take
	// turns among themselves, not in the control plane's slots. Every
	// agent may serve them (the semaphore is in etcd): a base URL that
	// names several agents survives one agent's reboot.
	Groups []FleetLockGroup `toml:"groups"`
}

// FleetLockGroup is one [[fleetlock.groups]] table.
type FleetLockGroup struct {
	Name          string   `toml:"name"`
	Slots         int      `toml:"slots"`
	AllowIDs      []string `toml:"allow_ids"`
	AllowNetworks []string `toml:"allow_networks"`
}

// Networks parses AllowNetworks (validated at load).
func (f FleetLock) Networks() ([]netip.Prefix, error) {
	return parseNetworks("fleetlock.allow_networks", f.AllowNetworks)
}

// ProxyAddrs parses Proxies (validated at load).
func (f FleetLock) ProxyAddrs() ([]netip.Addr, error) {
	var out []netip.Addr
	for _, p := range f.Proxies {
		a, err := netip.ParseAddr(p)
		if err != nil {
			return nil, fmt.Errorf("fleetlock.proxies: %w", err)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

// Networks parses the group's AllowNetworks (validated at load).
func (g FleetLockGroup) Networks() ([]netip.Prefix, error) {
	return parseNetworks("fleetlock.groups "+g.Name+" allow_networks", g.AllowNetworks)
}

func parseNetworks(key string, ns []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, n := range ns {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
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
	k.allowList("fleetlock.", f.AllowIDs, f.AllowNetworks)
	for _, p := range f.Proxies {
		if a, err := netip.ParseAddr(p); err != nil || a.Zone() != "" {
			k.fail("fleetlock.proxies", "%q is not an IP address like \"10.0.0.5\" or \"fd00::5\" (one address, not a range)", p)
		}
	}
	seen := map[string]bool{}
	for i, g := range f.Groups {
		key := fmt.Sprintf("fleetlock.groups[%d].", i)
		switch {
		case !ValidName(g.Name):
			k.fail(key+"name", "%q is not a valid group name (letters, digits, '.', '-')", g.Name)
		case g.Name == k.c.Lock.Group:
			k.failRel(key+"name", []string{"lock.group"}, "%q is the agents' own group (lock.group): it is served already, with lock.slots", g.Name)
		case seen[g.Name]:
			k.fail(key+"name", "group %q listed twice", g.Name)
		}
		seen[g.Name] = true
		if g.Slots < 1 {
			k.fail(key+"slots", "must be at least 1, got %d", g.Slots)
		}
		k.allowList(key, g.AllowIDs, g.AllowNetworks)
	}
	k.serveLocalMember(f)
	if f.Listen != "" {
		host, port, err := net.SplitHostPort(f.Listen)
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil || n < 1 || n > 65535 || strings.ContainsAny(host, "/ ") {
			k.fail("fleetlock.listen", "must be \"host:port\" or \"\" (off), got %q", f.Listen)
		}
		if len(k.c.Etcd.Endpoints) == 0 {
			k.failRel("etcd.endpoints", []string{"fleetlock.listen"}, "at least one endpoint is needed while fleetlock.listen is set")
		}
		if f.CertFile == "" && !loopbackHost(host) {
			k.warn("fleetlock.listen", "%q serves FleetLock over plain HTTP off loopback: anyone on the network can read and forge requests; "+
				"set fleetlock.cert_file and key_file (workers trust its CA) and fleetlock.allow_networks (the workers' addresses), or listen on loopback", f.Listen)
		}
	}
	// zincati's FleetLock client presents no certificate (a plain reqwest
	// client: coreos/zincati src/fleet_lock/mod.rs), so a server that asks
	// for one refuses every zincati; the allow-list is how to narrow it.
	if f.ClientCAFile != "" && f.CertFile != "" {
		k.warn("fleetlock.client_ca_file", "zincati sends no client certificate: every zincati is refused; "+
			"limit who may queue with fleetlock.allow_networks and allow_ids instead")
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

// loopbackHost is a listen host reachable only from this host ("" and
// unspecified addresses listen everywhere).
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// allowList checks the allow_ids and allow_networks under prefix.
func (k *checker) allowList(prefix string, ids, nets []string) {
	for _, id := range ids {
		if id == "" || len(id) > 253 || strings.ContainsAny(id, "/ \t\n") {
			k.fail(prefix+"allow_ids", "%q is not a FleetLock client id (printable, no spaces or '/')", id)
		}
	}
	for _, n := range nets {
		if _, err := netip.ParsePrefix(n); err != nil {
			k.fail(prefix+"allow_networks", "%q is not a CIDR like \"10.0.0.0/24\": %v", n, err)
		}
	}
}

// serveLocalMember checks that this host's zincati can reach the server
// over loopback, the only way a request proves it comes from this host.
func (k *checker) serveLocalMember(f *FleetLock) {
	if !f.ServeLocalMember {
		return
	}
	if f.Listen == "" {
		k.failRel("fleetlock.serve_local_member", []string{"fleetlock.listen"},
			"needs fleetlock.listen: this host's zincati points its [updates.fleet_lock] base_url at the local server")
		return
	}
	host, _, err := net.SplitHostPort(f.Listen)
	if err != nil {
		return // fleetlock.listen's own error says it
	}
	if ip, err := netip.ParseAddr(host); err == nil && !ip.Unmap().IsLoopback() && !ip.IsUnspecified() {
		k.failRel("fleetlock.serve_local_member", []string{"fleetlock.listen"},
			"fleetlock.listen %q is not reachable over loopback: this host's zincati would connect from %s and be refused as a member; "+
				"listen on a loopback address or on all (\":PORT\")", f.Listen, host)
	}
}
