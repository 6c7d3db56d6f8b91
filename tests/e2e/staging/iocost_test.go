//go:build e2e

package staging

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/iocost"
	"github.com/update-agent/update-agent/tests/guest"
)

const (
	iocostConf = "/etc/update-agent/config.d/62-e2e-iocost.toml"
	// etcdStandin stands for etcd.local_unit: a running unit whose
	// IOWeight the window raises (the guest has no etcd).
	etcdStandin = "ua-e2e-etcd.service"
)

// iocostOn turns iocost on for the staging window with staging's lines,
// etcd.local_unit a running stand-in unit, and checks the guest's kernel
// has iocost (Debian 12's: CONFIG_BLK_CGROUP_IOCOST=y).
func iocostOn(t *testing.T, g *guest.Guest, staging string) {
	t.Helper()
	if _, _, code, _ := g.Run(context.Background(), "test -e /sys/fs/cgroup/io.cost.qos"); code != 0 {
		t.Fatal("the guest's kernel has no iocost (no /sys/fs/cgroup/io.cost.qos)")
	}
	g.MustRun(t, "systemctl stop "+etcdStandin+" 2>/dev/null; systemctl reset-failed "+etcdStandin+" 2>/dev/null; "+
		"systemd-run --quiet --unit="+etcdStandin+" sleep infinity")
	g.MustRun(t, `printf '[staging]\n`+staging+`\n[etcd]\nlocal_unit = "`+etcdStandin+`"\n' >`+iocostConf)
	t.Cleanup(func() {
		g.MustRun(t, "rm -f "+iocostConf+"; systemctl stop "+etcdStandin+"; systemctl reset-failed "+etcdStandin+" 2>/dev/null; true")
	})
}

// costLines are the data disk's io.cost.qos and io.cost.model lines
// without the device ("" when iocost was never set up on it).
func costLines(t *testing.T, g *guest.Guest) (qos, model string) {
	t.Helper()
	dev := strings.TrimSpace(g.MustRun(t, "cat /sys/block/"+dataDisk()+"/dev"))
	get := func(f string) string {
		l := strings.TrimSpace(g.MustRun(t, "grep '^"+dev+" ' /sys/fs/cgroup/"+f+" || true"))
		return strings.TrimSpace(strings.TrimPrefix(l, dev))
	}
	return get("io.cost.qos"), get("io.cost.model")
}

// assertCostOff checks iocost is off on the data disk with the kernel's
// own parameters and model, as before any window.
func assertCostOff(t *testing.T, g *guest.Guest, when string) {
	t.Helper()
	qos, model := costLines(t, g)
	if qos != "" && !strings.HasPrefix(qos, "enable=0 ctrl=auto ") {
		t.Errorf("io.cost.qos %s: %q, want off with the kernel's parameters", when, qos)
	}
	if model != "" && !strings.HasPrefix(model, "ctrl=auto ") {
		t.Errorf("io.cost.model %s: %q, want the kernel's auto model", when, model)
	}
}

// dataDiskModel is a cost model of the data disk's limits in
// staging.iocost_models' syntax, and what the kernel shows for it.
func dataDiskModel() (conf, shown string) {
	m := "rbps=20000000 rseqiops=500 rrandiops=500 wbps=20000000 wseqiops=500 wrandiops=500"
	return `iocost_models = ["` + dataDisk() + " " + m + `"]`, "ctrl=user model=linear " + m
}

// windowQoS is the window's QoS line: no etcd metrics in the guest, so
// the default 20 ms target; vrate up to 1000 % whatever the model's
// source (given, learned or the seed).
const windowQoS = "enable=1 ctrl=user rpct=99.00 rlat=20000 wpct=99.00 wlat=20000 min=5.00 max=1000.00"

// assertCostWindow checks iocost on the data disk, with the QoS and the
// model shown as wantQoS and model (prefixes), and the weights while the
// staging unit runs. The kernel keeps vrate across this boot's windows:
// a window that found it away from 100 % runs both rebased on it
// (iocost.Rebase), its bounds times the carried vrate, the model over it;
// the model in force is returned.
func assertCostWindow(t *testing.T, g *guest.Guest, wantQoS, model string) string {
	t.Helper()
	qos, inForce := costLines(t, g)
	carried := 100.0
	if mx, ok := qosField(qos, "max"); ok {
		if want, _ := qosField(wantQoS, "max"); want > 0 && math.Abs(mx-want) > 0.01 {
			carried = mx / want * 100
			t.Logf("the kernel kept vrate %.2f %% from an earlier window: the window rebased on it", carried)
		}
	}
	head := func(q string) string { return q[:max(strings.Index(q, " min="), 0)] }
	wmin, _ := qosField(wantQoS, "min")
	wmax, _ := qosField(wantQoS, "max")
	gmin, _ := qosField(qos, "min")
	gmax, _ := qosField(qos, "max")
	if head(qos) != head(wantQoS) || math.Abs(gmin-wmin*carried/100) > 0.011 || math.Abs(gmax-wmax*carried/100) > 0.011 {
		t.Errorf("io.cost.qos while staging: %q, want %q with its bounds times %.2f %%", qos, wantQoS, carried)
	}
	want, err := iocost.ParseModel(model)
	if err != nil {
		t.Fatal(err)
	}
	if carried != 100 {
		want = want.Scale(100 * 100 / carried)
	}
	if got, err := iocost.ParseModel(inForce); err != nil || !nearModel(got, want) {
		t.Errorf("io.cost.model while staging: %q, want %q", inForce, strings.TrimPrefix(want.Line("x"), "x "))
	}
	for unit, want := range map[string]string{stagingUnit: "1", "rpm-ostreed.service": "1", etcdStandin: "10000"} {
		if w := show(t, g, unit, "IOWeight")["IOWeight"]; w != want {
			t.Errorf("%s IOWeight=%q while staging, want %s", unit, w, want)
		}
	}
	if mx := strings.TrimSpace(g.MustRun(t, "cat /sys/fs/cgroup/system.slice/"+stagingUnit+"/io.max 2>/dev/null || true")); mx != "" {
		t.Errorf("staging unit io.max %q under iocost, want no cap", mx)
	}
	return inForce
}

// qosField is an io.cost.qos line's numeric key.
func qosField(line, key string) (float64, bool) {
	for _, kv := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// nearModel: the same model up to the rounding of a rebase (one unit a
// parameter, a thousandth of it).
func nearModel(a, b iocost.Model) bool {
	near := func(x, y uint64) bool {
		d := math.Abs(float64(x) - float64(y))
		return d <= 1 || d <= float64(max(x, y))/1000
	}
	return a.User == b.User && near(a.RBps, b.RBps) && near(a.RSeqIOPS, b.RSeqIOPS) && near(a.RRandIOPS, b.RRandIOPS) &&
		near(a.WBps, b.WBps) && near(a.WSeqIOPS, b.WSeqIOPS) && near(a.WRandIOPS, b.WRandIOPS)
}

// assertCostRestored checks what the window changed is back.
func assertCostRestored(t *testing.T, g *guest.Guest, daemonWeight, etcdWeight string) {
	t.Helper()
	assertCostOff(t, g, "after the window")
	if w := show(t, g, etcdStandin, "IOWeight")["IOWeight"]; w != etcdWeight {
		t.Errorf("%s IOWeight=%q after the window, want %q back", etcdStandin, w, etcdWeight)
	}
	if w := show(t, g, "rpm-ostreed.service", "IOWeight")["IOWeight"]; w != daemonWeight {
		t.Errorf("rpm-ostreed.service IOWeight=%q after the window, want %q back", w, daemonWeight)
	}
	if out, _, code, _ := g.Run(context.Background(), "ls /var/lib/update-agent/iocost.json"); code == 0 {
		t.Errorf("iocost record left: %s", out)
	}
}

// TestIOCostWindow stages under iocost with no model given: the window
// starts from the seed, learns the disk from the kernel's vrate (the pull
// delay keeps it over iocost.MinLearnWindow), and is put back after.
func TestIOCostWindow(t *testing.T) {
	g := setup(t)
	iocostOn(t, g, "iocost = true")
	g.MustRun(t, "rm -f /var/lib/update-agent/iocost-learned.json")
	pullDelayFor(t, g, "40s")
	// The running daemon has no delay in its environment yet (the window
	// sets its policy live, without a restart): the window would end
	// before iocost.MinLearnWindow.
	g.MustRun(t, "systemctl restart rpm-ostreed")
	assertCostOff(t, g, "before staging")
	b := snapshot(t, g)
	etcdWeight := show(t, g, etcdStandin, "IOWeight")["IOWeight"]
	nextUpdate(t, g)

	startStageOnce(t, g)
	waitStagingUnit(t, g)
	seed := strings.TrimPrefix(iocost.Seed.Line("x"), "x ")
	assertCostWindow(t, g, windowQoS, seed) // none configured or learned: the seed
	if st := waitStageOnce(t, g, 15*time.Minute); st != "0" {
		t.Fatalf("stage-once exited %s; journal:\n%s", st, g.MustRun(t, "journalctl -u "+onceUnit+" --no-pager | tail -60"))
	}
	assertCostRestored(t, g, b.weights["IOWeight"], etcdWeight)
	assertWindowClosed(t, g, b)
	// The journal says which model and where the target came from (the
	// log's fields are journal fields).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inv := strings.TrimSpace(g.MustRun(t, "systemctl show -p InvocationID --value "+onceUnit))
	entries, err := g.Journal(ctx, onceUnit)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		if e["_SYSTEMD_INVOCATION_ID"] != inv {
			continue
		}
		str := func(k string) string { v, _ := e[k].(string); return v }
		switch str("SUMMARY") {
		case "iocost on for the staging window":
			seen["model"] = strings.HasPrefix(str("MODEL_SOURCE"), "seed")
		case "iocost model learned":
			// The kernel's vrate, read from the root cgroup's io.stat,
			// times the seed: the line to pin names the disk.
			seen["learned"] = strings.HasPrefix(str("MODEL"), dataDisk()+" rbps=") && str("VRATE_PCT") != ""
		case "iocost QoS for the staging window":
			seen["target"] = str("LATENCY_SOURCE") == "default (no etcd baseline)"
		case "iocost restored after the staging window":
			seen["restored"] = true
		case "staging window closed":
			seen["summary"] = str("IOCOST") == "true"
		}
	}
	for _, k := range []string{"model", "learned", "target", "restored", "summary"} {
		if !seen[k] {
			t.Errorf("journal lacks the %s line (or its field); journal:\n%s", k, g.MustRun(t, "journalctl -u "+onceUnit+" --no-pager -o verbose | grep -E 'MESSAGE=iocost|MODEL_SOURCE|LATENCY_SOURCE|IOCOST=|VRATE' | tail -20"))
		}
	}
	// Kept for the next window, by the disk's serial or name and size.
	if l := g.MustRun(t, "cat /var/lib/update-agent/iocost-learned.json"); !strings.Contains(l, `"disk": "`+dataDisk()+`"`) || !strings.Contains(l, `"windows": 1`) {
		t.Errorf("iocost-learned.json after the window:\n%s", l)
	}
}

// TestIOCostRestoredAfterKill kills stage-once with SIGKILL in the iocost
// window: iocost stays on, with the configured model, and etcd's weight
// high until the next start (the daemon, updates off so it only
// recovers) puts them back from the records. staging.iocost is
// "with-model" (this suite's base configuration turns iocost off): a
// model for the data disk turns iocost on there.
func TestIOCostRestoredAfterKill(t *testing.T) {
	g := setup(t)
	modelConf, model := dataDiskModel()
	iocostOn(t, g, `iocost = "with-model"\n`+modelConf)
	pullDelay(t, g)
	assertCostOff(t, g, "before staging")
	b := snapshot(t, g)
	etcdWeight := show(t, g, etcdStandin, "IOWeight")["IOWeight"]
	nextUpdate(t, g)

	startStageOnce(t, g)
	waitStagingUnit(t, g)
	inWindow := assertCostWindow(t, g, windowQoS, model)
	g.MustRun(t, "systemctl kill -s KILL "+onceUnit)
	if !poll(time.Minute, func() bool { return show(t, g, onceUnit, "SubState")["SubState"] == "failed" }) {
		t.Fatal("stage-once survived SIGKILL")
	}
	// What the kill leaves: iocost on, the weights, the records.
	if qos, m := costLines(t, g); !strings.HasPrefix(qos, "enable=1 ctrl=user") || m != inWindow {
		t.Fatalf("io.cost.qos %q and model %q after the kill: the test did not kill mid-window", qos, m)
	}
	if w := show(t, g, etcdStandin, "IOWeight")["IOWeight"]; w != "10000" {
		t.Fatalf("%s IOWeight=%q after the kill, want the window's 10000", etcdStandin, w)
	}
	if _, _, code, _ := g.Run(context.Background(), "test -e /var/lib/update-agent/iocost.json && test -e /var/lib/update-agent/staging-undo.json"); code != 0 {
		t.Fatal("no iocost record or undo journal after the kill")
	}

	// The next start: the daemon recovers before anything else. It refuses
	// lock.enabled = false on a host that says it runs an etcd member
	// (etcd.local_unit), so this recovery-only daemon runs without it: the
	// etcd unit's weight comes back from the undo journal, not the config.
	g.MustRun(t, `printf '[staging]\niocost = true\n' >`+iocostConf)
	g.MustRun(t, `printf '[updates]\nenabled = false\n[lock]\nenabled = false\n' >`+daemonConf)
	t.Cleanup(func() {
		g.MustRun(t, "systemctl stop update-agent.service; systemctl reset-failed update-agent.service 2>/dev/null; rm -f "+daemonConf+" /var/lib/update-agent/engine.json; true")
	})
	g.MustRun(t, "systemctl start update-agent.service")
	if !poll(3*time.Minute, func() bool {
		_, _, code, _ := g.Run(context.Background(), "test -e /var/lib/update-agent/iocost.json")
		return code != 0
	}) {
		t.Fatalf("iocost record still there after the daemon started; journal:\n%s", g.MustRun(t, "journalctl -u update-agent --no-pager -o cat | tail -40"))
	}
	assertCostRestored(t, g, b.weights["IOWeight"], etcdWeight)
	if s := scheduler(t, g); s != b.sched {
		t.Errorf("data disk scheduler after recovery %q, want %q back", s, b.sched)
	}
	if a := strings.TrimSpace(g.MustRun(t, "systemctl is-active "+stagingUnit+" || true")); a == "active" {
		t.Errorf("staging unit still running after recovery")
	}
	j := g.MustRun(t, "journalctl -u update-agent --no-pager -o cat")
	for _, want := range []string{"undoing what an interrupted staging left behind", "iocost restored after the staging window"} {
		if !strings.Contains(j, want) {
			t.Errorf("the daemon's journal lacks %q:\n%s", want, j)
		}
	}
}

// TestBfqUdevRuleOptIn: the RPM's bfq rule does nothing until an operator
// links it into udev's rules; linked, a disk event selects bfq.
func TestBfqUdevRuleOptIn(t *testing.T) {
	g := setup(t)
	const rule = "/usr/share/update-agent/udev/60-update-agent-bfq.rules"
	const link = "/etc/udev/rules.d/60-update-agent-bfq.rules"
	was := scheduler(t, g)
	if strings.Contains(was, "[bfq]") {
		t.Fatalf("data disk already on bfq: %q", was)
	}
	cur := was[strings.Index(was, "[")+1 : strings.Index(was, "]")]
	t.Cleanup(func() {
		g.MustRun(t, "rm -f "+link+"; udevadm control --reload; echo "+cur+" >/sys/block/"+dataDisk()+"/queue/scheduler")
	})
	trigger := "udevadm trigger --settle --action=change /sys/block/" + dataDisk()
	g.MustRun(t, "test -f "+rule+" && "+trigger)
	if s := scheduler(t, g); strings.Contains(s, "[bfq]") {
		t.Fatalf("bfq selected with the rule only shipped, not linked: %q", s)
	}
	g.MustRun(t, "ln -s "+rule+" "+link+" && udevadm control --reload && "+trigger)
	if s := scheduler(t, g); !strings.Contains(s, "[bfq]") {
		t.Errorf("scheduler %q with the rule linked, want [bfq]", s)
	}
}
