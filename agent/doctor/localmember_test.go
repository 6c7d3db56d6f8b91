package doctor

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The zincati fragment of packaging/examples/member-with-zincati: keys
// from coreos/zincati src/config/fragments.rs (UpdateFragment.strategy,
// UpdateFleetLock.base_url).
const etcStrategy = "/etc/zincati/config.d/55-updates-strategy.toml"

func memberZincati() ZincatiReboots {
	return ZincatiReboots{Strategy: "fleet_lock", StrategyFile: etcStrategy, FleetLockURL: "http://127.0.0.1:8444/", FleetLockFile: etcStrategy}
}

func TestZincatiMember(t *testing.T) {
	const key = "fleetlock.serve_local_member (set in /etc/update-agent/config.d/70-fleetlock.toml): "
	refused := errors.New("connect: connection refused")
	for _, tc := range []struct {
		name   string
		change func(*Doctor)
		dial   error
		want   string // verdict and detail, prefix of the line's text after the check
		dialed string // the address dialed, "" none
	}{
		{"member semantics", func(*Doctor) {}, nil,
			`ok    fleetlock local member this host's zincati gets member semantics: [updates] strategy "fleet_lock" and base_url "http://127.0.0.1:8444/" (` + etcStrategy + `) name the FleetLock server on loopback (fleetlock.listen = "127.0.0.1:8444"), which answers`,
			"127.0.0.1:8444"},
		{"listening on all addresses, localhost", func(d *Doctor) {
			d.In.FleetLockListen = ":8444"
			d.In.Zincati.FleetLockURL = "http://localhost:8444"
		}, nil, `ok    fleetlock local member this host's zincati gets member semantics`, "localhost:8444"},
		{"nothing answers", func(*Doctor) {}, refused,
			`FAIL  fleetlock local member ` + key + `nothing answers at zincati's base_url "http://127.0.0.1:8444/" (connect: connection refused): run the server, ` +
				"`systemctl enable --now update-agent-fleetlock.service`", "127.0.0.1:8444"},
		{"zincati's default strategy", func(d *Doctor) { d.In.Zincati = ZincatiReboots{} }, nil,
			`FAIL  fleetlock local member ` + key + `this host's zincati reboots without asking the FleetLock server: its [updates] strategy is unset (zincati's default, "immediate"); set strategy = "fleet_lock" and [updates.fleet_lock] base_url = "http://127.0.0.1:8444/" in /etc/zincati/config.d`, ""},
		{"periodic", func(d *Doctor) { d.In.Zincati.Strategy = "periodic" }, nil,
			`FAIL  fleetlock local member ` + key + `this host's zincati reboots without asking the FleetLock server: its [updates] strategy is "periodic" (` + etcStrategy + `)`, ""},
		{"no base_url", func(d *Doctor) { d.In.Zincati.FleetLockURL, d.In.Zincati.FleetLockFile = "", "" }, nil,
			`FAIL  fleetlock local member ` + key + `zincati's [updates.fleet_lock] base_url is unset`, ""},
		{"another host's server", func(d *Doctor) { d.In.Zincati.FleetLockURL = "http://10.0.0.12:8444/" }, nil,
			`FAIL  fleetlock local member ` + key + `zincati's [updates.fleet_lock] base_url "http://10.0.0.12:8444/" (` + etcStrategy + `) is not this host's FleetLock server over loopback (fleetlock.listen = "127.0.0.1:8444"): a request from anywhere else is refused as an etcd member's (client_is_etcd_member); set base_url = "http://127.0.0.1:8444/"`, ""},
		{"another port", func(d *Doctor) { d.In.Zincati.FleetLockURL = "http://127.0.0.1:8443/" }, nil,
			`FAIL  fleetlock local member ` + key + `zincati's [updates.fleet_lock] base_url "http://127.0.0.1:8443/"`, ""},
		{"plain HTTP to a TLS server", func(d *Doctor) { d.In.FleetLockTLS = true }, nil,
			`FAIL  fleetlock local member ` + key + `zincati's [updates.fleet_lock] base_url "http://127.0.0.1:8444/" (` + etcStrategy + `) is not this host's FleetLock server over loopback (fleetlock.listen = "127.0.0.1:8444"): a request from anywhere else is refused as an etcd member's (client_is_etcd_member); set base_url = "https://127.0.0.1:8444/"`, ""},
		{"in /run: gone at the next boot", func(d *Doctor) { d.In.Zincati.FleetLockFile = "/run/zincati/config.d/60-fleetlock.toml" }, nil,
			`WARN  fleetlock local member this host's zincati gets member semantics: [updates] strategy "fleet_lock" and base_url "http://127.0.0.1:8444/" (/run/zincati/config.d/60-fleetlock.toml) name the FleetLock server on loopback (fleetlock.listen = "127.0.0.1:8444"), which answers; but /run/zincati/config.d/60-fleetlock.toml is not in /etc/zincati/config.d`,
			"127.0.0.1:8444"},
		{"zincati unreadable", func(d *Doctor) { d.In.HostGraphErr = errors.New(etcStrategy + ": updates.strategy: must be a string") }, nil,
			`FAIL  fleetlock local member ` + key + `zincati's configuration is unreadable, so whether this host's zincati asks the local server is unknown: ` + etcStrategy + `: updates.strategy: must be a string`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := good()
			d.In.FleetLockListen, d.In.ServeLocalMember = "127.0.0.1:8444", true
			d.In.ServeLocalMemberFile = "/etc/update-agent/config.d/70-fleetlock.toml"
			d.In.Zincati = memberZincati()
			var dialed string
			d.DialFleetLock = func(_ context.Context, addr string) error { dialed = addr; return tc.dial }
			tc.change(&d)
			rep := d.Run(context.Background())
			var line *Result
			for i := range rep {
				if rep[i].Check == "fleetlock local member" {
					line = &rep[i]
				}
			}
			if line == nil {
				t.Fatalf("no fleetlock local member line in %v", rep)
			}
			if got := line.String(); !strings.HasPrefix(got, tc.want) {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if dialed != tc.dialed {
				t.Errorf("dialed %q, want %q", dialed, tc.dialed)
			}
			if wantFail := strings.HasPrefix(tc.want, "FAIL"); (line.Verdict() == "FAIL") != wantFail || (rep.Failed() > 0) != wantFail && tc.name != "listening on all addresses, localhost" {
				t.Errorf("verdict %s, Failed() = %d, want a failure: %v", line.Verdict(), rep.Failed(), wantFail)
			}
		})
	}
}

// Without fleetlock.serve_local_member there is no such line.
func TestZincatiMemberOnlyWhenServing(t *testing.T) {
	d := good()
	d.In.Zincati = ZincatiReboots{Strategy: "immediate"}
	for _, r := range d.Run(context.Background()) {
		if r.Check == "fleetlock local member" {
			t.Errorf("line without serve_local_member: %v", r)
		}
	}
}
