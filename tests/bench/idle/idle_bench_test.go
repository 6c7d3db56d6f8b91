//go:build bench

package idle

import (
	"bufio"
	"fmt"
	"github.com/update-agent/update-agent/agent/sdnotify/sdnotifytest"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

// smoke is BENCH_SMOKE=1 (make bench-smoke): a short run so the benchmark
// cannot rot; its figures mean little.
var smoke = os.Getenv("BENCH_SMOKE") == "1"

// quick is BENCH_QUICK=1: 10 minutes instead of an hour.
var quick = os.Getenv("BENCH_QUICK") == "1"

// repoRoot is where go.mod is, from this package's directory.
const repoRoot = "../../.."

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration like 1h", name, v)
	}
	return d
}

// TestIdleCost runs the real daemon (built from cmd/update-agent) with
// nothing to do for BENCH_IDLE_FOR (default 1h; 10 min under BENCH_QUICK=1,
// 20 s under BENCH_SMOKE=1)
// against a 3-member etcd whose /metrics its guard scrapes for the rolling
// baseline, the rpm-ostree stand-in with no update published, and the lock
// enabled. Every BENCH_IDLE_EVERY (default 5 s) it samples the daemon's
// RSS and CPU from /proc; it reports them with the scrapes and rpm-ostree
// runs seen. systemd is not here: a private D-Bus daemon stands in for the
// system bus so the stager's connection is made as on a host (an idle agent
// calls nothing on it). The unit's Environment= lines apply.
func TestIdleCost(t *testing.T) {
	runFor := envDuration(t, "BENCH_IDLE_FOR", time.Hour)
	if quick {
		runFor = envDuration(t, "BENCH_IDLE_FOR", 10*time.Minute)
	}
	every := envDuration(t, "BENCH_IDLE_EVERY", 5*time.Second)
	if smoke {
		runFor = envDuration(t, "BENCH_IDLE_FOR", 20*time.Second)
		every = envDuration(t, "BENCH_IDLE_EVERY", time.Second)
	}
	if !standintest.Have() {
		t.Fatal("the ostree CLI is not installed: the rpm-ostree stand-in cannot run")
	}
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Fatal("dbus-daemon is not installed (apt-get install dbus): it stands in for the system bus")
	}
	tmp := t.TempDir()
	agentBin := buildAgent(t, tmp)
	sbin, err := standintest.Build(tmp)
	if err != nil {
		t.Fatal(err)
	}
	host := standintest.New(t, sbin) // generation 0 booted, nothing newer published

	// etcd's default heartbeat and election: the agent's client sees what it
	// sees on a host.
	c := etcdtest.Start(t, etcdtest.Options{Members: 3, TickMs: 100, ElectionMs: 1000})
	var scrapes, scrapeBytes atomic.Int64
	metrics := countingProxy(t, c.Members[0].ClientURL, &scrapes, &scrapeBytes)

	root := filepath.Join(tmp, "root")
	writeFile(t, filepath.Join(root, "etc/update-agent/config.d/50-bench.toml"), fmt.Sprintf(`
[agent]
rpm_ostree = %q
node_name = "node-0"
[etcd]
endpoints = [%q]
member = %q
[lock]
enabled = true
[guard]
metrics_url = %q
`, sbin.RpmOstree, c.Members[0].ClientURL, c.Members[0].Name, metrics+"/metrics"))
	writeFile(t, filepath.Join(root, "proc/sys/kernel/random/boot_id"), "idle-bench-boot\n")

	bus := startBus(t, tmp)
	notify := sdnotifytest.Listen(t, filepath.Join(tmp, "notify.sock"))
	logPath := filepath.Join(tmp, "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(agentBin, "daemon", "--root", root)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(baseEnv(), host.ClientEnv("update-agent.service")...)
	cmd.Env = append(cmd.Env, "DBUS_SYSTEM_BUS_ADDRESS="+bus, "NOTIFY_SOCKET="+notify.Path)
	unitEnv := unitEnvironment(t)
	cmd.Env = append(cmd.Env, unitEnv...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("agent log:\n%s", b)
		}
	})

	readyBy := time.Now().Add(90 * time.Second)
	for !notify.Has("READY=1") {
		select {
		case err := <-exited:
			t.Fatalf("the agent exited before READY: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(readyBy) {
			t.Fatal("the agent was not READY within 90 s")
		}
	}

	pid := cmd.Process.Pid
	var samples []Sample
	end := time.Now().Add(runFor)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		s, err := ReadProc("/proc", pid)
		if err != nil {
			t.Fatalf("sampling the agent (pid %d): %v", pid, err)
		}
		samples = append(samples, s)
		if !s.At.Before(end) {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the agent exited while idle: %v", err)
		case <-tick.C:
		}
	}
	stop()

	log, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	runs, warns := CountLog(string(log), sbin.RpmOstree)
	counts := Counts{Scrapes: scrapes.Load(), ScrapeBytes: scrapeBytes.Load(), RPMOstree: runs, Warnings: warns}
	sum := Summarize(samples)
	setup := fmt.Sprintf("`update-agent daemon` built from cmd/update-agent, idle: 3 etcd members "+
		"(the guard scrapes member 0's /metrics for its rolling baseline), the lock enabled, the rpm-ostree "+
		"stand-in with nothing to update, the default check interval (15 min +- 5 min). "+
		"Environment from the unit: %s. Host load average at the end: %s.", orNone(unitEnv), loadAvg())
	md := Markdown(sum, counts, setup)
	fmt.Print(md)
	writeResult(t, "idle-cost.md", md)
	var csvBuf strings.Builder
	if err := WriteCSV(&csvBuf, samples); err != nil {
		t.Fatal(err)
	}
	writeResult(t, "idle-cost.csv", csvBuf.String())
	if os.Getenv("BENCH_OUT") != "" {
		// The test's temporary directory is no path of the reader's.
		writeResult(t, "idle-cost-agent.log", strings.ReplaceAll(string(log), tmp, "<tmp>"))
	}

	// No figure is asserted; a run that did not exercise the idle loop is
	// no result.
	if counts.Scrapes == 0 {
		t.Error("the agent never scraped etcd's metrics: the rolling baseline did not run")
	}
	if runs["status"] == 0 {
		t.Error("the agent never ran rpm-ostree status")
	}
	if !strings.Contains(string(log), "no update available") {
		t.Error(`the agent never checked for updates ("no update available" missing from its log)`)
	}
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return "`" + strings.Join(s, " ") + "`"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// buildAgent builds cmd/update-agent as the RPM's spec does: a PIE where
// the spec asks for one (its relocated data is the process's own memory).
func buildAgent(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "update-agent")
	args := []string{"build", "-trimpath", "-o", out}
	switch runtime.GOARCH {
	case "386", "amd64", "arm", "arm64", "ppc64le", "s390x", "riscv64":
		args = append(args, "-buildmode=pie")
	}
	cmd := exec.Command("go", append(args, "./cmd/update-agent")...)
	cmd.Dir = repoRoot
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/update-agent: %v\n%s", err, msg)
	}
	return out
}

// baseEnv is this process's environment without the Go runtime's knobs
// (the unit's own Environment= decides those) and without a journal.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOGC", "GOMEMLIMIT", "GODEBUG", "GOMAXPROCS", "JOURNAL_STREAM", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// unitEnvironment is what units/update-agent.service sets for the agent:
// its Environment= assignments, and WATCHDOG_USEC from WatchdogSec=.
func unitEnvironment(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "units/update-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "Environment="); ok {
			for _, kv := range strings.Fields(v) {
				env = append(env, strings.Trim(kv, `"`))
			}
		}
		if v, ok := strings.CutPrefix(line, "WatchdogSec="); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("update-agent.service: WatchdogSec=%s: %v", v, err)
			}
			env = append(env, fmt.Sprintf("WATCHDOG_USEC=%d", d.Microseconds()))
		}
	}
	return env
}

// countingProxy serves etcd's client URL through a reverse proxy that counts
// the requests and bytes of /metrics, and returns its URL.
func countingProxy(t *testing.T, target string, n, bytes *atomic.Int64) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			n.Add(1)
			w = &countingWriter{ResponseWriter: w, n: bytes}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	k, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(k))
	return k, err
}

// startBus runs a private D-Bus daemon and returns its address.
func startBus(t *testing.T, dir string) string {
	t.Helper()
	sock := filepath.Join(dir, "system_bus_socket")
	addr := "unix:path=" + sock
	cmd := exec.Command("dbus-daemon", "--session", "--nofork", "--nopidfile", "--address="+addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(sock); err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatal("dbus-daemon did not create its socket in 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeResult writes name under $BENCH_OUT when set.
func writeResult(t *testing.T, name, content string) {
	t.Helper()
	dir := os.Getenv("BENCH_OUT")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
