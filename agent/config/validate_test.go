package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestValidationRules loads one fragment per rule and checks that the
// error names the fragment, the key and the rule.
func TestValidationRules(t *testing.T) {
	tests := []struct {
		frag string
		key  string
		msg  string // prefix of the message after "file: key: "
	}{
		{"[agent]\ncheck_interval = \"0s\"", "agent.check_interval", `must be > 0, got "0s"`},
		{"[agent]\ncheck_jitter = \"-1m\"", "agent.check_jitter", `must be >= 0, got "-1m"`},
		{"[agent]\nstate_dir = \"var/lib/x\"", "agent.state_dir", `must be an absolute path, got "var/lib/x"`},
		{"[agent]\nnode_name = \"node 1\"", "agent.node_name", `must be "auto" or match ^[a-zA-Z0-9.-]+$, got "node 1"`},
		{"[agent]\nrpm_ostree = \"rpm-ostree\"", "agent.rpm_ostree", `must be an absolute path`},
		{"[updates]\nsource = \"git\"", "updates.source", `must be one of "origin", "image"`},
		{"[updates]\nsource = \"image\"", "updates.image", `required when updates.source is "image"`},
		{"[updates]\nbackend = \"dnf\"", "updates.backend", `must be one of "auto", "rpm-ostree", "bootc", got "dnf"`},
		{"[updates]\nbackend = \"bootc\"\nsource = \"image\"\nimage = \"ostree-unverified-registry:example.invalid/os:1\"", "updates.backend", `"bootc" needs updates.source = "origin"`},
		{"[agent]\nbootc = \"bootc\"", "agent.bootc", `must be an absolute path`},
		{"[updates]\nsource = \"image\"\nimage = \"example.invalid/os:1\"", "updates.image", `must start with an ostree transport`},
		{"[updates]\nmax_attempts = 0", "updates.max_attempts", `must be >= 1, got 0`},
		{"[staging]\nio_scheduling_class = \"low\"", "staging.io_scheduling_class", `must be one of "idle", "best-effort", "realtime", "none", got "low"`},
		{"[staging]\nio_scheduling_priority = 8", "staging.io_scheduling_priority", `must be 0-7, got 8`},
		{"[staging]\nio_scheduling_priority = -1", "staging.io_scheduling_priority", `must be 0-7, got -1`},
		{"[staging]\nio_weight = 0", "staging.io_weight", `must be 1-10000, got 0`},
		{"[staging]\nio_weight = 10001", "staging.io_weight", `must be 1-10000, got 10001`},
		{"[staging]\ncpu_weight = 0", "staging.cpu_weight", `must be 1-10000 or "idle", got 0`},
		{"[staging]\ncpu_weight = \"fast\"", "staging.cpu_weight", `must be 1-10000 or "idle", got "fast"`},
		{"[staging]\ncpu_weight = 10001", "staging.cpu_weight", `must be 1-10000 or "idle", got 10001`},
		{"[staging]\nnice = -21", "staging.nice", `must be -20-19, got -21`},
		{"[staging]\nnice = 20", "staging.nice", `must be -20-19, got 20`},
		{"[staging]\nmemory_high = \"256\"", "staging.memory_high", `must be "infinity" or >= 1M, got 256 bytes (missing K/M/G suffix?)`},
		{"[staging]\nmemory_high = \"256MB\"", "staging.memory_high", `invalid size "256MB"`},
		{"[staging]\nmemory_high = 256", "staging.memory_high", `must be a size string like "256M", "auto" or "infinity"`},
		{"[staging]\nmemory_high = \"automatic\"", "staging.memory_high", `invalid size "automatic"`},
		{"[staging]\nio_write_bandwidth_max = \"20\"", "staging.io_write_bandwidth_max", `must be "auto", "" (no cap) or >= 1M, got 20 bytes/s`},
		{"[staging]\nio_write_bandwidth_max = \"fast\"", "staging.io_write_bandwidth_max", `invalid size "fast"`},
		{"[guard]\nlatency_target = 1.0", "guard.latency_target", `must be > 1 and <= guard.latency_factor (2), got 1`},
		{"[guard]\nlatency_target = 3.0", "guard.latency_target", `must be > 1 and <= guard.latency_factor (2), got 3`},
		{"[guard]\nbaseline_max_age = \"0s\"", "guard.baseline_max_age", `must be`},
		{"[staging]\nio_write_bandwidth_max = \"-5M\"", "staging.io_write_bandwidth_max", `invalid size "-5M"`},
		{"[staging]\nscheduler = \"cfq\"", "staging.scheduler", `must be one of "", "bfq", "mq-deadline", "kyber", "none", got "cfq"`},
		{"[staging]\nnr_requests = 2", "staging.nr_requests", `must be 0 (leave alone) or >= 4, got 2`},
		{"[staging]\nmax_sectors_kb = 1", "staging.max_sectors_kb", `must be 0 (leave alone) or >= 4, got 1`},
		{"[staging]\npaths = [\"/sysroot\", \"var\"]", "staging.paths[1]", `must be an absolute path, got "var"`},
		{"[staging]\netcd_io_latency_target = \"10ms\"", "staging.etcd_io_latency_target", `needs etcd.local_unit`},
		{"[staging]\ntimeout = \"0s\"", "staging.timeout", `must be > 0, got "0s"`},
		{"[staging]\niocost_models = [\"vda rbps=1\"]", "staging.iocost_models[0]", `"vda rbps=1": missing rseqiops`},
		{"[staging]\niocost_models = [\"vda rbps=1 rseqiops=1 rrandiops=1 wbps=1 wseqiops=1 wrandiops=1\", \"vda rbps=2 rseqiops=1 rrandiops=1 wbps=1 wseqiops=1 wrandiops=1\"]", "staging.iocost_models[1]", `a second model for vda (first at iocost_models[0])`},
		{"[staging]\niocost = \"learn\"", "staging.iocost", `must be true, false, "with-model" or "auto", got "learn"`},
		{"[staging]\niocost = 1", "staging.iocost", `must be true, false, "with-model" or "auto", got an integer`},
		{"[staging]\niocost_etcd_io_weight = 0", "staging.iocost_etcd_io_weight", `must be 1-10000 or "auto", got 0`},
		{"[staging]\niocost_etcd_io_weight = \"max\"", "staging.iocost_etcd_io_weight", `must be 1-10000 or "auto", got "max"`},
		{"[staging]\niocost_percentile = 0.0", "staging.iocost_percentile", `must be > 0 and <= 100, got 0`},
		{"[staging]\niocost_vrate_min = 0.0", "staging.iocost_vrate_min", `must be > 0 and <= 10000 (percent), got 0`},
		{"[staging]\niocost_vrate_max = 4.0", "staging.iocost_vrate_max", `must be >= iocost_vrate_min (5) and <= 10000 (percent), got 4`},
		{"[staging]\niocost_io_weight = 0", "staging.iocost_io_weight", `must be 1-10000, got 0`},
		{"[staging]\niocost_default_latency_target = \"0s\"", "staging.iocost_default_latency_target", `must be > 0, got "0s"`},
		{"[etcd]\nallow_quorum_loss = true\n[leader]\nrequire_quorum = false", "etcd.allow_quorum_loss", `has no effect while leader.require_quorum is false`},
		{"[leader]\nfollowers_grace = \"-1m\"", "leader.followers_grace", `must be >= 0, got "-1m"`},
		{"[leader]\nfollowers_grace = \"25h\"", "leader.followers_grace", `must be <= 24h (the leader's node waits this long`},
		{"[guard]\nmetrics_url = \"ftp://h/metrics\"", "guard.metrics_url", `must be an http:// or https:// URL, got "ftp://h/metrics"`},
		{"[guard]\nmetrics_url = \"http:///metrics\"", "guard.metrics_url", `has no host`},
		{"[guard]\nfsync_p99_threshold = \"-1ms\"", "guard.fsync_p99_threshold", `must be >= 0, got "-1ms"`},
		{"[guard]\nlatency_factor = 1.0", "guard.latency_factor", `must be > 1, got 1`},
		{"[guard]\nrate_loop_latency_factor = 1.0", "guard.rate_loop_latency_factor", `must be > 1, got 1`},
		{"[guard]\nmetrics_interval = \"0s\"", "guard.metrics_interval", `must be > 0, got "0s"`},
		{"[guard]\nrate_probe_interval = \"0s\"", "guard.rate_probe_interval", `must be > 0, got "0s"`},
		{"[guard]\nlearn_period = \"0s\"", "guard.learn_period", `must be > 0, got "0s"`},
		{"[guard]\nthaw_factor = 0.9", "guard.thaw_factor", `must be >= 1 and <= guard.latency_factor (2), got 0.9`},
		{"[guard]\nthaw_factor = 2.5", "guard.thaw_factor", `must be >= 1 and <= guard.latency_factor (2), got 2.5`},
		{"[guard]\nmin_freeze = \"0s\"", "guard.min_freeze", `must be > 0, got "0s"`},
		{"[guard]\nmin_freeze = \"3s\"", "guard.min_freeze", `must be <= guard.max_freeze (2s), got "3s"`},
		{"[guard]\nmin_run_share = 0.0", "guard.min_run_share", `must be > 0 and <= 1, got 0`},
		{"[guard]\nmin_run_share = 1.5", "guard.min_run_share", `must be > 0 and <= 1, got 1.5`},
		{"[guard]\nio_pressure_threshold = 0.0", "guard.io_pressure_threshold", `must be > 0 and <= 100 (percent), got 0`},
		{"[guard]\nio_pressure_threshold = 101.0", "guard.io_pressure_threshold", `must be > 0 and <= 100 (percent), got 101`},
		{"[guard]\ninterval = \"0s\"", "guard.interval", `must be > 0, got "0s"`},
		{"[guard]\nwindow = \"100ms\"", "guard.window", `must be >= guard.interval (250ms), got "100ms"`},
		{"[guard]\nmax_freeze = \"0s\"", "guard.max_freeze", `must be > 0, got "0s"`},
		{"[guard]\nmax_total_pause = \"-1s\"", "guard.max_total_pause", `must be > 0, got "-1s"`},
		{"[lock]\ngroup = \"a/b\"", "lock.group", `must match ^[a-zA-Z0-9.-]+$, got "a/b"`},
		{"[lock]\ngroup = \"\"", "lock.group", `must match`},
		{"[lock]\nslots = 0", "lock.slots", `must be >= 1, got 0`},
		{"[lock]\nkey_prefix = \"lock/\"", "lock.key_prefix", `must start with "/" and not end with one, got "lock/"`},
		{"[lock]\nreboot_lease_ttl = \"4s\"", "lock.reboot_lease_ttl", `must be >= 5s (etcd raises shorter lease TTLs to its minimum), got "4s"`},
		{"[lock]\nreboot_lease_ttl = \"5500ms\"", "lock.reboot_lease_ttl", `must be whole seconds (etcd lease TTLs are), got "5.5s"`},
		{"[etcd]\nendpoints = []", "etcd.endpoints", `at least one endpoint is needed while lock.enabled is true`},
		{"[etcd]\nendpoints = [\"127.0.0.1:2379\"]", "etcd.endpoints[0]", `must be an http:// or https:// URL`},
		{"[etcd]\nendpoints = [\"https://10.0.0.1\"]", "etcd.endpoints[0]", `must name host and port`},
		{"[etcd]\nendpoints = [\"https://10.0.0.1:2379/v3\"]", "etcd.endpoints[0]", `must not have a path or query`},
		{"[etcd]\nendpoints = [\"https://10.0.0.1:99999\"]", "etcd.endpoints[0]", `bad port`},
		{"[etcd]\nendpoints = [\"https://a:2379\", \"http://b:2379\"]", "etcd.endpoints", `mixes http and https endpoints`},
		{"[etcd]\nendpoints = [\"https://a:2379\"]\nca_file = \"/etc/pki/ca.pem\"", "etcd.ca_file", `cannot read "/etc/pki/ca.pem": no such file or directory`},
		{"[etcd]\nendpoints = [\"https://a:2379\"]\nca_file = \"pki/ca.pem\"", "etcd.ca_file", `must be an absolute path`},
		{"[etcd]\nendpoints = [\"https://a:2379\"]\nca_file = \"/etc\"", "etcd.ca_file", `"/etc" is a directory, not a file`},
		{"[etcd]\nca_file = \"/etc/present.pem\"", "etcd.ca_file", `set, but no endpoint uses https`},
		{"[etcd]\nendpoints = [\"https://a:2379\"]\ncert_file = \"/etc/present.pem\"", "etcd.key_file", `etcd.cert_file and etcd.key_file must be set together`},
		{"[etcd]\nusername = \"root\"", "etcd.password_file", `etcd.username and etcd.password_file must be set together`},
		{"[etcd]\nusername = \"root\"\npassword_file = \"/etc/none\"", "etcd.password_file", `cannot read "/etc/none"`},
		{"[etcd]\ndial_timeout = \"0s\"", "etcd.dial_timeout", `must be > 0, got "0s"`},
		{"[etcd]\nmember = \"\"", "etcd.member", `must be "auto" or the local member's name`},
		{"[etcd]\nlocal_unit = \"etcd\"", "etcd.local_unit", `must be "" or a service unit name like "etcd.service", got "etcd"`},
		{"[etcd]\nlocal_unit = \"etcd.service\"\nlocal_process = \"etcd\"", "etcd.local_process", `set with etcd.local_unit`},
		{"[etcd]\nlocal_process = \"/usr/bin/etcd\"", "etcd.local_process", `must be "" or a process name as /proc/PID/comm shows it (1-15 characters, no "/"), like "etcd", got "/usr/bin/etcd"`},
		{"[etcd]\nlocal_process = \"etcd-member-long-name\"", "etcd.local_process", `must be "" or a process name as /proc/PID/comm shows it (1-15 characters, no "/"), like "etcd", got "etcd-member-long-name"`},
		{"[reboot]\nstrategy = \"later\"", "reboot.strategy", `must be one of "immediate", "periodic", got "later"`},
		{"[reboot]\ntime_zone = \"Mars/Olympus\"", "reboot.time_zone", `unknown time zone "Mars/Olympus"`},
		{"[reboot]\ntime_zone = \"\"", "reboot.time_zone", `unknown time zone ""`},
		{"[reboot]\nstrategy = \"periodic\"", "reboot.windows", `strategy "periodic" needs at least one window`},
		{"[[reboot.windows]]\ndays = [\"Mon\", \"Fun\"]\nstart = \"22:00\"\nlength = \"1h\"", "reboot.windows[0].days", `unknown day "Fun"`},
		{"[[reboot.windows]]\ndays = []\nstart = \"22:00\"\nlength = \"1h\"", "reboot.windows[0].days", `must list at least one day`},
		{"[[reboot.windows]]\ndays = [\"Mon\"]\nstart = \"22h\"\nlength = \"1h\"", "reboot.windows[0].start", `must be a time "HH:MM" (00:00-23:59), got "22h"`},
		{"[[reboot.windows]]\ndays = [\"Mon\"]\nstart = \"22:00\"", "reboot.windows[0].length", `must be > 0 and <= 168h, got "0s"`},
		{"[[fleetlock.groups]]\nname = \"workers\"", "fleetlock.groups[0].slots", `must be at least 1, got 0`},
		{"[[fleetlock.groups]]\nname = \"a/b\"\nslots = 1", "fleetlock.groups[0].name", `"a/b" is not a valid group name`},
		{"[[fleetlock.groups]]\nname = \"default\"\nslots = 1", "fleetlock.groups[0].name", `"default" is the agents' own group (lock.group)`},
		{"[[fleetlock.groups]]\nname = \"w\"\nslots = 1\n[[fleetlock.groups]]\nname = \"w\"\nslots = 2", "fleetlock.groups[1].name", `group "w" listed twice`},
		{"[[fleetlock.groups]]\nname = \"w\"\nslots = 1\nallow_networks = [\"10.0.0.0/33\"]", "fleetlock.groups[0].allow_networks", `"10.0.0.0/33" is not a CIDR`},
		{"[[fleetlock.groups]]\nname = \"w\"\nslots = 1\nallow_ids = [\"a b\"]", "fleetlock.groups[0].allow_ids", `"a b" is not a FleetLock client id`},
		{"[[reboot.windows]]\ndays = [\"Mon\"]\nstart = \"22:00\"\nstart_time = \"23:00\"\nlength = \"1h\"", "reboot.windows[0].start_time", `set start or start_time (zincati's spelling), not both`},
		{"[[reboot.windows]]\ndays = [\"Mon\"]\nstart = \"22:00\"\nlength = \"1h\"\nlength_minutes = 60", "reboot.windows[0].length_minutes", `set length or length_minutes (zincati's spelling), not both`},
		{"[[reboot.windows]]\ndays = [\"Mon\"]\nstart_time = \"25:00\"\nlength_minutes = 60", "reboot.windows[0].start_time", `must be a time "HH:MM"`},
		{"[[reboot.windows]]\ndays = [\"Mon\"]\nstart_time = \"22:00\"\nlength_minutes = -5", "reboot.windows[0].length_minutes", `must be > 0 and <= 168h`},
		{"[[reboot.hooks]]\nargv = []\ntimeout = \"1m\"", "reboot.hooks[0].argv", `must not be empty`},
		{"[[reboot.hooks]]\nargv = [\"kubectl\", \"drain\"]\ntimeout = \"1m\"", "reboot.hooks[0].argv", `argv[0] must be an absolute path (they run without a shell or PATH), got "kubectl"`},
		{"[[reboot.hooks]]\nargv = [\"/bin/true\"]\ntimeout = \"1m\"\n[[reboot.hooks]]\nargv = [\"/bin/true\"]", "reboot.hooks[1].timeout", `must be > 0, got "0s"`},
		{"[reboot]\nlogged_in_delay = \"-1s\"", "reboot.logged_in_delay", `must be >= 0, got "-1s"`},
		{"[reboot]\nlogged_in_delay = \"15m\"", "reboot.logged_in_delay", `must be shorter than lock.reboot_lease_ttl (15m, the reboot budget: the node holds its slot while it waits), got "15m"`},
		{"[reboot]\nlogged_in_delay = \"20m\"\n[lock]\nreboot_lease_ttl = \"10m\"", "reboot.logged_in_delay", `must be shorter than lock.reboot_lease_ttl (10m,`},
		{"[reboot]\nlogged_in_delay = \"61m\"\n[lock]\nenabled = false", "reboot.logged_in_delay", `must be <= 1h (the node holds its group's reboot slot while it waits), got "1h1m"`},
		{"[lock]\nmin_interval = \"2s\"", "lock.min_interval", `must be "0s" or whole seconds >= 5s (it is an etcd lease TTL), got "2s"`},
		{"[lock]\nmin_interval = \"7500ms\"", "lock.min_interval", `must be "0s" or whole seconds >= 5s`},
		{"[gates]\nalertmanager_url = \"alertmanager:9093\"", "gates.alertmanager_url", `must be an http:// or https:// URL, got "alertmanager:9093"`},
		{"[gates]\nalertmanager_url = \"http://am:9093\"\nalert_regexp = \"Etcd(\"", "gates.alert_regexp", `not a regular expression`},
		{"[gates]\ntimeout = \"0s\"", "gates.timeout", `must be > 0, got "0s"`},
		{"[gates]\ncert_file = \"/nonexistent/c.pem\"", "gates.cert_file", `cannot read "/nonexistent/c.pem"`},
		{"[[gates.commands]]\nargv = [\"healthy\"]\ntimeout = \"1m\"", "gates.commands[0].argv", `argv[0] must be an absolute path (they run without a shell or PATH), got "healthy"`},
		{"[[gates.commands]]\nargv = [\"/bin/true\"]", "gates.commands[0].timeout", `must be > 0, got "0s"`},
		{"[metrics]\nlisten = \"unix:run/m.sock\"", "metrics.listen", `must be an absolute path`},
		{"[metrics]\nlisten = \"localhost\"", "metrics.listen", `must be "unix:/path", "host:port" or "" (off), got "localhost"`},
		{"[metrics]\nlisten = \"127.0.0.1:70000\"", "metrics.listen", `must be "unix:/path", "host:port"`},
		{"[staging]\npace_foreign = true", "staging.pace_foreign", `companion mode: needs updates.enabled = false`},
		{"[staging]\npace_foreign = 1", "staging.pace_foreign", ``},
	}
	for _, tt := range tests {
		t.Run(tt.key+"/"+strings.ReplaceAll(tt.frag, "\n", " "), func(t *testing.T) {
			root := writeTree(t, map[string]string{
				etcDir + "50-x.toml":        tt.frag + "\n",
				"/etc/present.pem":          "x",
				usrDir + "00-defaults.toml": "",
			})
			_, _, err := Load(root)
			want := filepath.Join(root, etcDir, "50-x.toml") + ": " + tt.key + ": " + tt.msg
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error:\n%v\nwant a line starting:\n%s", err, want)
			}
		})
	}
}

// TestValidBoundaries: values at the edge of every range are accepted.
func TestValidBoundaries(t *testing.T) {
	frags := []string{
		"[staging]\nio_scheduling_priority = 0\nio_weight = 1\ncpu_weight = 1\nnice = -20\nmemory_high = \"1M\"\nio_write_bandwidth_max = \"1M\"\nnr_requests = 4\nmax_sectors_kb = 4",
		"[staging]\nio_scheduling_priority = 7\nio_weight = 10000\ncpu_weight = \"10000\"\nnice = 19\nmemory_high = \"infinity\"\nio_write_bandwidth_max = \"1.5G\"\nscheduler = \"\"\nio_scheduling_class = \"best-effort\"",
		"[staging]\netcd_io_latency_target = \"25ms\"\n[etcd]\nlocal_unit = \"etcd-member@a.service\"",
		"[staging]\niocost = true",
		"[staging]\npace_foreign = true\n[updates]\nenabled = false",
		"[staging]\niocost = \"with-model\"",
		"[staging]\niocost = \"auto\"\nmemory_high = \"auto\"\niocost_etcd_io_weight = \"auto\"",
		"[staging]\niocost = \"with-model\"\niocost_models = [\"vda rbps=20000000 rseqiops=500 rrandiops=500 wbps=20000000 wseqiops=500 wrandiops=500\"]\niocost_percentile = 100.0\niocost_vrate_min = 150.0\niocost_vrate_max = 150.0\niocost_io_weight = 10000\niocost_etcd_io_weight = 1\niocost_latency_target = \"5ms\"",
		"[lock]\nreboot_lease_ttl = \"5s\"\nslots = 1\ngroup = \"control-plane.eu-1\"",
		"[guard]\nmetrics_url = \"\"\nio_pressure_threshold = 100.0\nlatency_factor = 1.01\nlatency_target = 1.01\nthaw_factor = 1.01\nmin_freeze = \"2s\"\nmin_run_share = 1.0\nwindow = \"1s\"",
		"[etcd]\nendpoints = [\"https://[fd00::1]:2379\", \"https://etcd-0.example.invalid:2379/\"]",
		"[lock]\nenabled = false\n[etcd]\nendpoints = []",
		"[reboot]\nlogged_in_delay = \"14m59s\"",
		"[reboot]\nlogged_in_delay = \"1h\"\n[lock]\nenabled = false\n[etcd]\nendpoints = []",
		"[metrics]\nlisten = \"\"",
		"[metrics]\nlisten = \"127.0.0.1:9100\"",
		"[metrics]\nlisten = \":9100\"",
		"[fleetlock]\nlisten = \"127.0.0.1:8080\"\n[etcd]\nendpoints = [\"https://e1:2379\"]",
		"[fleetlock]\nlisten = \"[::1]:8080\"\n[etcd]\nendpoints = [\"https://e1:2379\"]",
		"[updates]\nsource = \"graph\"\n[cincinnati]\nbase_url = \"https://updates.example.invalid/graph-v1/\"",
		"[updates]\nsource = \"image\"\nimage = \"ostree-unverified-registry:example.invalid/os:stable\"",
		"[reboot]\nstrategy = \"periodic\"\ntime_zone = \"Local\"\n[[reboot.windows]]\ndays = [\"mon\", \"Tuesday\"]\nstart = \"0:00\"\nlength = \"168h\"",
		"[[fleetlock.groups]]\nname = \"workers\"\nslots = 2\nallow_networks = [\"10.0.1.0/24\"]\n[[fleetlock.groups]]\nname = \"infra\"\nslots = 1",
		// zincati's spelling of a window, pasted from its docs.
		"[reboot]\nstrategy = \"periodic\"\ntime_zone = \"localtime\"\n[[reboot.windows]]\ndays = [ \"Sat\", \"Sun\" ]\nstart_time = \"23:30\"\nlength_minutes = 60",
	}
	for _, f := range frags {
		root := writeTree(t, map[string]string{etcDir + "50-x.toml": f + "\n"})
		if _, s, err := Load(root); err != nil || len(s.Warnings) > 0 {
			t.Errorf("fragment\n%s\nerror: %v, warnings: %q", f, err, s.Warnings)
		}
	}
}

func TestWarnings(t *testing.T) {
	for frag, want := range map[string]string{
		"[updates]\nimage = \"ostree-unverified-registry:example.invalid/os:1\"":                                           `updates.image: ignored while updates.source is "origin"`,
		"[staging]\nscheduler = \"mq-deadline\"":                                                                           `staging.scheduler: io_scheduling_class "idle" only has an effect with bfq`,
		"[[reboot.windows]]\ndays = [\"Sat\"]\nstart = \"01:00\"\nlength = \"1h\"":                                         `reboot.windows: ignored while reboot.strategy is "immediate"`,
		"[identity]\ngroup = \"workers\"":                                                                                  `identity.group: the update graph's group, ignored while updates.source is not "graph"; the reboot slots' group is lock.group`,
		"[staging]\niocost = false\niocost_models = [\"vda rbps=1 rseqiops=1 rrandiops=1 wbps=1 wseqiops=1 wrandiops=1\"]": `staging.iocost_models: ignored while staging.iocost is false`,
		"[updates]\nsource = \"graph\"\n[cincinnati]\nbase_url = \"https://updates.example.invalid/v1/graph/\"":            `cincinnati.base_url: ends in /v1/graph, which the agent appends`,
		"[fleetlock]\nlisten = \":8080\"\n[etcd]\nendpoints = [\"https://e1:2379\"]":                                       `fleetlock.listen: ":8080" serves FleetLock over plain HTTP off loopback: anyone on the network can read and forge requests; set fleetlock.cert_file and key_file (workers trust its CA) and fleetlock.allow_networks (the workers' addresses)`,
		"[fleetlock]\nlisten = \"10.0.0.5:8080\"\n[etcd]\nendpoints = [\"https://e1:2379\"]":                               `fleetlock.listen: "10.0.0.5:8080" serves FleetLock over plain HTTP off loopback`,
	} {
		root := writeTree(t, map[string]string{etcDir + "50-x.toml": frag + "\n"})
		_, s, err := Load(root)
		if err != nil {
			t.Errorf("%s: %v", frag, err)
		}
		if len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "50-x.toml: "+want) {
			t.Errorf("%s: warnings %q, want %q", frag, s.Warnings, want)
		}
	}
}

// TestValidateWithoutSources: a Config built in code (no files) still gets
// key paths, and the defaults are valid.
func TestValidateWithoutSources(t *testing.T) {
	if err := Default().Validate("/"); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	c := Default()
	c.Lock.Slots = 0
	c.Reboot.Hooks = []Hook{{Argv: []string{"/bin/true"}, Timeout: Duration(-time.Second)}}
	err := c.Validate("/")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"lock.slots: must be >= 1, got 0", `reboot.hooks[0].timeout: must be > 0, got "-1s"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nmissing %q", err, want)
		}
	}
	if strings.Contains(err.Error(), DefaultSource+":") {
		t.Errorf("error names %q as a file: %v", DefaultSource, err)
	}
}

func TestTLSFilesResolvedUnderRoot(t *testing.T) {
	pems := newTestPEM(t)
	root := writeTree(t, map[string]string{
		"/etc/pki/etcd/ca.crt":     pems.cert,
		"/etc/pki/etcd/client.crt": pems.cert,
		"/etc/pki/etcd/client.key": pems.key,
		etcDir + "50-tls.toml": "[etcd]\nendpoints = [\"https://10.0.0.1:2379\"]\nca_file = \"/etc/pki/etcd/ca.crt\"\n" +
			"cert_file = \"/etc/pki/etcd/client.crt\"\nkey_file = \"/etc/pki/etcd/client.key\"\n",
	})
	if _, _, err := Load(root); err != nil {
		t.Fatalf("files present under root: %v", err)
	}
	if err := os.Remove(filepath.Join(root, "/etc/pki/etcd/client.key")); err != nil {
		t.Fatal(err)
	}
	_, _, err := Load(root)
	if err == nil || !strings.Contains(err.Error(), `50-tls.toml: etcd.key_file: cannot read "/etc/pki/etcd/client.key"`) {
		t.Fatalf("missing key: %v", err)
	}
}

// TestDaemonNeedsLockOnMember: lock.enabled = false is refused for the
// daemon where etcd.local_unit or etcd.member says the host runs a member,
// naming the file that disabled the lock; a worker (member "auto", no
// local unit) may run without it, and stage-once's Load accepts both.
func TestDaemonNeedsLockOnMember(t *testing.T) {
	for _, tt := range []struct{ frag, want string }{
		{"[lock]\nenabled = false\n[etcd]\nlocal_unit = \"etcd.service\"", `lock.enabled: must be true on a host that runs an etcd member (etcd.local_unit = "etcd.service"): without the lock`},
		{"[lock]\nenabled = false\n[etcd]\nmember = \"cp1\"", `lock.enabled: must be true on a host that runs an etcd member (etcd.member = "cp1")`},
		{"[lock]\nenabled = false\n[etcd]\nendpoints = []", ""},
		{"[etcd]\nlocal_unit = \"etcd.service\"\nmember = \"cp1\"", ""},
		{"[lock]\nenabled = false\n[etcd]\nlocal_process = \"etcd\"", `lock.enabled: must be true on a host that runs an etcd member (etcd.local_process = "etcd")`},
	} {
		root := writeTree(t, map[string]string{etcDir + "50-x.toml": tt.frag + "\n"})
		c, _, err := Load(root)
		if err != nil {
			t.Fatalf("%s: Load: %v", tt.frag, err)
		}
		err = c.CheckDaemon()
		switch want := filepath.Join(root, etcDir, "50-x.toml") + ": " + tt.want; {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.frag, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error\n%v\nwant\n%s", tt.frag, err, want)
		}
	}
}
