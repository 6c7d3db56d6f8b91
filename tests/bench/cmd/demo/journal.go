package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/update-agent/update-agent/tests/bench/latency"
	"github.com/update-agent/update-agent/tests/guest"
)

const fetchedFlag = "/run/demo-results-fetched"

// persistAcrossReboot makes what the demo set up survive the guest's reboot:
// a persistent journal (the timeline spans both boots), the sysroot's bind
// mount, and the units enabled.
func persistAcrossReboot(ctx context.Context, g *guest.Guest) error {
	drain := "#!/bin/sh\n# Pre-reboot hook of the demo: stop the measuring loads and wait until the\n# demo fetched their results (bounded), as a drain hook waits for pods.\n" +
		"systemctl stop bench-fio.service bench-put.service 2>/dev/null\n" +
		"for i in $(seq 1 120); do [ -e " + fetchedFlag + " ] && exit 0; sleep 1; done\nexit 0\n"
	_, err := sh(ctx, g, strings.Join([]string{
		"mkdir -p /var/log/journal",
		"systemd-tmpfiles --create --prefix /var/log/journal",
		"systemctl restart systemd-journald",
		"grep -q rpm-ostree-standin /etc/fstab || echo '" + latency.DataDir + "/sysroot " + latency.SysrootDir +
			" none bind,x-systemd.requires-mounts-for=" + latency.DataDir + " 0 0' >> /etc/fstab",
		"printf '%s' " + shq(drain) + " > /usr/local/bin/demo-drain && chmod 0755 /usr/local/bin/demo-drain",
		"systemctl daemon-reload",
		"systemctl enable -q rpm-ostreed.service ostree-finalize-staged.service bench-etcd.service update-agent.service",
	}, " && "))
	return err
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// agentConfig is the demo's fragment over the shipped defaults.
const agentConfig = `# update-agent demo: one guest, one etcd member.
[agent]
check_jitter = "0s"
[staging]
paths = ["/var/lib/rpm-ostree-standin", "/var/lib/data"]
[etcd]
endpoints = ["http://127.0.0.1:2379"]
local_unit = "bench-etcd.service"
[guard]
metrics_url = "http://127.0.0.1:2381/metrics"
[lock]
enabled = true
group = "demo"
reboot_lease_ttl = "15m"
[leader]
# A one-member cluster: the member always leads and its reboot always takes
# quorum away, so the leader rules are off here (make bench exercises them
# on a 3-member cluster).
followers_first = false
move_leader = false
require_quorum = false
[reboot]
strategy = "immediate"
[[reboot.hooks]]
argv = ["/usr/local/bin/demo-drain"]
timeout = "3m"
`

func writeAgentConfig(ctx context.Context, g *guest.Guest) error {
	_, err := sh(ctx, g, "mkdir -p /etc/update-agent/config.d && rm -f /etc/update-agent/config.d/* "+fetchedFlag+
		" && printf '%s' "+shq(agentConfig)+" > /etc/update-agent/config.d/50-demo.toml && update-agent check-config >/dev/null")
	return err
}

// entry is one journal entry.
type entry map[string]any

func (e entry) str(k string) string {
	switch v := e[k].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

func (e entry) at() time.Time {
	us, _ := strconv.ParseInt(e.str("__REALTIME_TIMESTAMP"), 10, 64)
	return time.UnixMicro(us).UTC()
}

// journal reads entries of units after cursor ("" from sinceUnix).
func journal(ctx context.Context, g *guest.Guest, units []string, cursor string, sinceUnix int64) ([]entry, error) {
	cmd := "journalctl -o json --no-pager"
	for _, u := range units {
		cmd += " -u " + u
	}
	if cursor != "" {
		cmd += " --after-cursor=" + shq(cursor)
	} else {
		cmd += fmt.Sprintf(" --since=@%d", sinceUnix)
	}
	out, err := sh(ctx, g, cmd)
	if err != nil {
		return nil, err
	}
	var es []entry
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e entry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			es = append(es, e)
		}
	}
	return es, nil
}

// follower prints the agent's journal as it comes.
type follower struct {
	g      *guest.Guest
	cursor string
	since  int64
	t0     time.Time
	squash squasher
}

func (f *follower) poll(ctx context.Context) ([]entry, error) {
	es, err := journal(ctx, f.g, []string{"update-agent"}, f.cursor, f.since)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		f.cursor = e.str("__CURSOR")
		if f.t0.IsZero() {
			f.t0 = e.at()
		}
		if l, ok := f.squash.add(e, f.t0); ok {
			fmt.Println("    " + l)
		}
	}
	return es, nil
}

// squasher keeps a timeline readable: status reads are left out, and a
// line repeated back to back with the same fields (a guard input that
// keeps failing) is shown once with its count. Lines that share only the
// message (the baseline of each signal, each setup step) are all shown.
type squasher struct {
	last    string
	repeats int
}

func (s *squasher) add(e entry, t0 time.Time) (string, bool) {
	if strings.Contains(e.str("ARGV"), "status --json") {
		return "", false
	}
	out := line(e, t0)
	// The line without its time.
	key := e.str("_SYSTEMD_UNIT") + "\x00" + strings.TrimSpace(out[strings.IndexByte(out, ' '):])
	if key == s.last {
		s.repeats++
		return "", false
	}
	if s.repeats > 0 {
		out = fmt.Sprintf("(previous line repeated %d more times)\n    %s", s.repeats, out)
	}
	s.last, s.repeats = key, 0
	return out, true
}

var agentFollower *follower

// followUntilStaged follows the agent until it reports the update staged;
// the window is the staging phase as the agent logged it.
func followUntilStaged(ctx context.Context, g *guest.Guest) (latency.Window, error) {
	out, err := sh(ctx, g, "date +%s")
	if err != nil {
		return latency.Window{}, err
	}
	since, _ := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	agentFollower = &follower{g: g, since: since - 5}
	var w latency.Window
	deadline := time.Now().Add(90 * time.Minute)
	for time.Now().Before(deadline) {
		es, err := agentFollower.poll(ctx)
		if err != nil {
			return w, err
		}
		for _, e := range es {
			switch e.str("STATE") {
			case "staging":
				if w.Start == 0 {
					w.Start = e.at().UnixNano()
				}
			case "staged", "waiting_slot", "holding_slot", "finalizing":
				if w.Start == 0 {
					return w, fmt.Errorf("the agent reported %q without a staging phase", e.str("STATE"))
				}
				w.End = e.at().UnixNano()
				return w, nil
			}
		}
		if _, err := sh(ctx, g, "systemctl -q is-active update-agent"); err != nil {
			return w, fmt.Errorf("update-agent stopped before staging finished: %w", err)
		}
		time.Sleep(2 * time.Second)
	}
	return w, fmt.Errorf("update-agent did not stage within 90 minutes")
}

// followUntilReleased lets the drain hook go on, follows the agent through
// the reboot and returns once it released the slot after the boot.
func followUntilReleased(ctx context.Context, g *guest.Guest) error {
	if _, err := sh(ctx, g, "touch "+fetchedFlag); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Minute)
	down := false
	for time.Now().Before(deadline) {
		es, err := agentFollower.poll(ctx)
		if err != nil {
			if !down {
				fmt.Println("    ... guest rebooting (ssh gone); waiting for it to come back")
				down = true
			}
			time.Sleep(5 * time.Second)
			continue
		}
		if down {
			fmt.Println("    ... guest back")
			down = false
		}
		for _, e := range es {
			if e.str("FROM") == "releasing" && e.str("STATE") == "idle" {
				return nil
			}
		}
		time.Sleep(2 * time.Second)
	}
	return fmt.Errorf("the agent did not release its slot within 30 minutes of staging")
}

// hidden are journal fields that say nothing to a reader of the timeline.
var hidden = map[string]bool{"MESSAGE": true, "SUMMARY": true, "PRIORITY": true, "SYSLOG_IDENTIFIER": true,
	"SYSLOG_FACILITY": true, "SYSLOG_PID": true, "SYSLOG_TIMESTAMP": true, "CODE_FILE": true, "CODE_LINE": true,
	"CODE_FUNC": true, "INVOCATION_ID": true, "MESSAGE_ID": true, "TID": true, "UNIT": true,
	"USER_UNIT": true, "USER_INVOCATION_ID": true, "JOB_ID": true, "JOB_TYPE": true, "JOB_RESULT": true,
	"ERRNO": true, "NODE": true, "GROUP": true}

// line renders one entry: time since t0, unit, message, its own fields.
func line(e entry, t0 time.Time) string {
	unit := strings.TrimSuffix(e.str("_SYSTEMD_UNIT"), ".service")
	if unit == "" {
		unit = e.str("SYSLOG_IDENTIFIER")
	}
	var kv []string
	for k := range e {
		if strings.HasPrefix(k, "_") || hidden[k] {
			continue
		}
		v := e.str(k)
		if v == "" || v == "<nil>" {
			continue
		}
		if len(v) > 16 && strings.HasSuffix(k, "CHECKSUM") {
			v = v[:12]
		}
		kv = append(kv, strings.ToLower(k)+"="+v)
	}
	sort.Strings(kv)
	d := e.at().Sub(t0).Round(100 * time.Millisecond)
	msg := e.str("MESSAGE")
	if s := e.str("SUMMARY"); s != "" {
		msg = s // the agent's MESSAGE repeats its fields, listed here already
	}
	return fmt.Sprintf("+%-8s %-16s %s  %s", d, unit, msg, strings.Join(kv, " "))
}

// printTimeline prints the agent, the daemon that writes the update, the
// finalization at shutdown and the etcd member's warnings, with the boots.
func printTimeline(ctx context.Context, g *guest.Guest, since int64) error {
	es, err := journal(ctx, g, []string{"update-agent", "rpm-ostreed", "ostree-finalize-staged", "bench-etcd"}, "", since)
	if err != nil {
		return err
	}
	if len(es) == 0 {
		return fmt.Errorf("the guest's journal has no entries since the agent started")
	}
	sort.SliceStable(es, func(i, j int) bool { return es[i].at().Before(es[j].at()) })
	t0 := es[0].at()
	boot := es[0].str("_BOOT_ID")
	etcdWarnings := 0
	var sq squasher
	for _, e := range es {
		if b := e.str("_BOOT_ID"); b != boot {
			boot = b
			fmt.Println("    ---------------- reboot: new boot " + b[:8] + " ----------------")
		}
		if strings.HasPrefix(e.str("_SYSTEMD_UNIT"), "bench-etcd") {
			// The member logs at warn: slow fdatasyncs and leader changes.
			etcdWarnings++
			if etcdWarnings > 20 {
				continue
			}
		}
		if l, ok := sq.add(e, t0); ok {
			fmt.Println("    " + l)
		}
	}
	if sq.repeats > 0 {
		fmt.Printf("    (previous line repeated %d more times)\n", sq.repeats)
	}
	if etcdWarnings > 20 {
		fmt.Printf("    (%d more etcd warnings left out)\n", etcdWarnings-20)
	}
	return nil
}
