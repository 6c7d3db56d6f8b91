package doctor

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"time"
)

// ZincatiReboots is how this host's zincati asks before it reboots: its
// merged [updates] strategy and [updates.fleet_lock] base_url, each with
// the fragment that set it ("" = unset).
type ZincatiReboots struct {
	Strategy, StrategyFile      string
	FleetLockURL, FleetLockFile string
}

// zincatiAdminDir is where an admin's zincati fragments belong: /run's
// are gone at the next boot, /usr/lib's are the OS's.
const zincatiAdminDir = "/etc/zincati/config.d"

// zincatiMember says whether, with fleetlock.serve_local_member, this
// host's zincati gets member semantics: it asks (strategy fleet_lock) the
// FleetLock server on this host over loopback (the only way a request
// proves it comes from this host), and something answers there.
func (d Doctor) zincatiMember(ctx context.Context) Result {
	f := localMemberFacts{Listen: d.In.FleetLockListen, TLS: d.In.FleetLockTLS, KeyFile: d.In.ServeLocalMemberFile,
		Z: d.In.Zincati, ZErr: d.In.HostGraphErr}
	r := localMemberVerdict(f)
	// Dialed once the configuration names this host's server: a wrong
	// base_url's own failure says more than its connection's.
	if addr, ok := zincatiTarget(f); ok && d.DialFleetLock != nil && (r.OK || r.Warn) {
		t := d.Timeout
		if t == 0 {
			t = 10 * time.Second
		}
		cctx, cancel := context.WithTimeout(ctx, t)
		defer cancel()
		f.Dialed, f.DialErr = true, d.DialFleetLock(cctx, addr)
		r = localMemberVerdict(f)
	}
	return r
}

type localMemberFacts struct {
	Listen  string
	TLS     bool
	KeyFile string // where fleetlock.serve_local_member is set
	Z       ZincatiReboots
	ZErr    error
	Dialed  bool
	DialErr error
}

// zincatiTarget is the host:port zincati's base_url names, when it names
// one.
func zincatiTarget(f localMemberFacts) (string, bool) {
	u, err := url.Parse(f.Z.FleetLockURL)
	if err != nil || u.Host == "" {
		return "", false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port), true
}

func localMemberVerdict(f localMemberFacts) Result {
	const check = "fleetlock local member"
	res := func(ok bool, format string, a ...any) Result {
		return Result{Check: check, OK: ok, Detail: fmt.Sprintf(format, a...)}
	}
	key := "fleetlock.serve_local_member"
	if f.KeyFile != "" {
		key += " (set in " + f.KeyFile + ")"
	}
	if f.ZErr != nil {
		return res(false, "%s: zincati's configuration is unreadable, so whether this host's zincati asks the local server is unknown: %v", key, f.ZErr)
	}
	scheme := "http"
	if f.TLS {
		scheme = "https"
	}
	host, port, _ := net.SplitHostPort(f.Listen)
	wantHost := "127.0.0.1"
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is6() && ip.IsLoopback() {
		wantHost = "[::1]"
	}
	want := fmt.Sprintf("%s://%s:%s/", scheme, wantHost, port)
	if f.Z.Strategy != "fleet_lock" {
		got := "unset (zincati's default, \"immediate\")"
		if f.Z.Strategy != "" {
			got = fmt.Sprintf("%q (%s)", f.Z.Strategy, f.Z.StrategyFile)
		}
		return res(false, "%s: this host's zincati reboots without asking the FleetLock server: its [updates] strategy is %s; set strategy = \"fleet_lock\" and [updates.fleet_lock] base_url = %q in %s",
			key, got, want, zincatiAdminDir)
	}
	if f.Z.FleetLockURL == "" {
		return res(false, "%s: zincati's [updates.fleet_lock] base_url is unset (strategy \"fleet_lock\" set in %s); set base_url = %q in %s",
			key, f.Z.StrategyFile, want, zincatiAdminDir)
	}
	u, err := url.Parse(f.Z.FleetLockURL)
	if err != nil || u.Scheme != scheme || !loopbackHost(u.Hostname()) || u.Port() != port {
		return res(false, "%s: zincati's [updates.fleet_lock] base_url %q (%s) is not this host's FleetLock server over loopback (fleetlock.listen = %q): "+
			"a request from anywhere else is refused as an etcd member's (client_is_etcd_member); set base_url = %q",
			key, f.Z.FleetLockURL, f.Z.FleetLockFile, f.Listen, want)
	}
	if f.Dialed && f.DialErr != nil {
		return res(false, "%s: nothing answers at zincati's base_url %q (%v): run the server, `systemctl enable --now update-agent-fleetlock.service` (fleetlock.listen = %q)",
			key, f.Z.FleetLockURL, f.DialErr, f.Listen)
	}
	ok := fmt.Sprintf("this host's zincati gets member semantics: [updates] strategy \"fleet_lock\" and base_url %q (%s) name the FleetLock server on loopback (fleetlock.listen = %q)",
		f.Z.FleetLockURL, f.Z.FleetLockFile, f.Listen)
	if f.Dialed {
		ok += ", which answers"
	}
	if f.TLS {
		ok += "; zincati must trust the server's certificate"
	}
	for _, file := range []string{f.Z.StrategyFile, f.Z.FleetLockFile} {
		if !strings.HasSuffix(filepath.Dir(file), zincatiAdminDir) {
			r := res(false, "%s; but %s is not in %s (/run's fragments are gone at the next boot, /usr/lib's are the OS's): move it there", ok, file, zincatiAdminDir)
			r.Warn = true
			return r
		}
	}
	return res(true, "%s", ok)
}

// loopbackHost: a URL host that reaches this host over loopback.
func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.Unmap().IsLoopback()
}
