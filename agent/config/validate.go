package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MinRebootLeaseTTL is the smallest reboot lease TTL accepted. etcd grants
// no lease shorter than its minLeaseTTL, ceil(1.5 x election timeout)
// (etcdserver/server.go: (3*ElectionTicks)/2 heartbeats), and silently
// raises a shorter TTL to it: 2s with the default 1s election timeout, 4s
// with the 2.5s used on slow clouds. 5s stays above both, so the TTL we
// configure is the TTL etcd applies. (A real reboot budget is minutes; the
// low floor keeps short TTLs usable in tests.)
const MinRebootLeaseTTL = 5 * time.Second

// The smallest memory size and bandwidth accepted ("1M" in their bases):
// they catch a forgotten suffix, as "256" is 256 bytes, not 256M.
const (
	minMemory    = 1 << 20
	minBandwidth = 1_000_000
)

var (
	nameRe = regexp.MustCompile(`^[a-zA-Z0-9.-]+$`)
	unitRe = regexp.MustCompile(`^[a-zA-Z0-9:_.\\@-]+\.service$`)
	// The kernel keeps 15 bytes of a process's name (TASK_COMM_LEN).
	processRe = regexp.MustCompile(`^[^/\s]{1,15}$`)
	ioClass   = []string{"idle", "best-effort", "realtime", "none"}
	ioScheds  = []string{"", "bfq", "mq-deadline", "kyber", "none"}
	// Transports rpm-ostree rebase accepts for a container image.
	imageTransports = []string{"ostree-unverified-registry:", "ostree-unverified-image:",
		"ostree-remote-registry:", "ostree-remote-image:", "ostree-image-signed:"}
)

// IOClassNumber maps an I/O scheduling class name to systemd's D-Bus value
// of IOSchedulingClass (IOPRIO_CLASS_*); -1 for an unknown name.
func IOClassNumber(name string) int32 {
	return int32(slices.Index([]string{"none", "realtime", "best-effort", "idle"}, name))
}

// Validate checks every key. root prefixes file paths (TLS files, password
// file) as Load's root does. Errors name the file a bad value came from
// when the Config was loaded.
func (c *Config) Validate(root string) error {
	errs, _ := c.check(root)
	return errors.Join(errs...)
}

// checker collects problems; each names the key and, through the sources,
// the file it came from.
type checker struct {
	c     *Config
	root  string
	errs  []error
	warns []string
}

func (k *checker) fail(key, format string, args ...any) {
	k.errs = append(k.errs, &FieldError{File: k.c.src.File(key), Key: key, Msg: fmt.Sprintf(format, args...)})
}

// failRel reports a rule between keys. It names the file of the first key
// that some file set, so that "required when ..." points at the fragment
// that made it required rather than at "default".
func (k *checker) failRel(key string, related []string, format string, args ...any) {
	file := k.c.src.File(key)
	for _, r := range related {
		if file != DefaultSource {
			break
		}
		file = k.c.src.File(r)
	}
	k.errs = append(k.errs, &FieldError{File: file, Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (k *checker) warn(key, format string, args ...any) {
	k.warns = append(k.warns, (&FieldError{File: k.c.src.File(key), Key: key, Msg: fmt.Sprintf(format, args...)}).Error())
}

func (k *checker) positive(key string, d Duration) {
	if d <= 0 {
		k.fail(key, "must be > 0, got %q", d.String())
	}
}

func (k *checker) nonNegative(key string, d Duration) {
	if d < 0 {
		k.fail(key, "must be >= 0, got %q", d.String())
	}
}

func (k *checker) intRange(key string, v, lo, hi int) {
	if v < lo || v > hi {
		k.fail(key, "must be %d-%d, got %d", lo, hi, v)
	}
}

func (k *checker) oneOf(key, v string, allowed []string) {
	if !slices.Contains(allowed, v) {
		k.fail(key, "must be one of %s, got %q", quoteList(allowed), v)
	}
}

func (k *checker) absPath(key, p string) {
	if !filepath.IsAbs(p) {
		k.fail(key, "must be an absolute path, got %q", p)
	}
}

// readable checks that a file exists under root and can be opened.
func (k *checker) readable(key, p string) bool {
	if !filepath.IsAbs(p) {
		k.absPath(key, p)
		return false
	}
	f, err := os.Open(filepath.Join(k.root, p))
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		k.fail(key, "cannot read %q: %v", p, err)
		return false
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		k.fail(key, "%q is a directory, not a file", p)
		return false
	}
	return true
}

func (c *Config) check(root string) ([]error, []string) {
	if root == "" {
		root = "/"
	}
	k := &checker{c: c, root: root}
	k.agent(&c.Agent)
	k.updates(&c.Updates)
	k.staging(&c.Staging)
	k.guard(&c.Guard)
	k.lock(&c.Lock)
	k.etcd(&c.Etcd)
	k.leader(&c.Leader)
	k.reboot(&c.Reboot)
	k.gates(&c.Gates)
	k.metrics(&c.Metrics)
	k.fleetLock(&c.FleetLock)
	k.graph(&c.Cincinnati, &c.Identity, c.Updates.Source)
	return k.errs, k.warns
}

func (k *checker) agent(a *Agent) {
	k.positive("agent.check_interval", a.CheckInterval)
	k.nonNegative("agent.check_jitter", a.CheckJitter)
	k.absPath("agent.state_dir", a.StateDir)
	if a.NodeName != "auto" && !nameRe.MatchString(a.NodeName) {
		k.fail("agent.node_name", "must be \"auto\" or match %s, got %q", nameRe, a.NodeName)
	} else if a.NodeName == "auto" {
		if _, err := autoNodeName(); err != nil {
			k.fail("agent.node_name", "%v", err)
		}
	}
	k.absPath("agent.rpm_ostree", a.RPMOstree)
	k.absPath("agent.bootc", a.Bootc)
	k.absPath("agent.ostree", a.Ostree)
}

func (k *checker) updates(u *Updates) {
	k.oneOf("updates.source", u.Source, []string{SourceOrigin, SourceImage, SourceGraph})
	switch {
	case u.Source == SourceImage && u.Image == "":
		k.failRel("updates.image", []string{"updates.source"}, "required when updates.source is \"image\"")
	case u.Image != "" && !slices.ContainsFunc(imageTransports, func(t string) bool {
		return strings.HasPrefix(u.Image, t) && len(u.Image) > len(t)
	}):
		k.fail("updates.image", "must start with an ostree transport (%s), got %q", strings.Join(imageTransports, " "), u.Image)
	case u.Source != SourceImage && u.Image != "":
		k.warn("updates.image", "ignored while updates.source is %q", u.Source)
	}
	if u.MaxAttempts < 1 {
		k.fail("updates.max_attempts", "must be >= 1, got %d", u.MaxAttempts)
	}
	k.backend(u)
}

// backend: bootc follows the booted image's tag; the other sources need
// rpm-ostree's rebase or deploy.
func (k *checker) backend(u *Updates) {
	k.oneOf("updates.backend", u.Backend, []string{BackendAuto, BackendRPMOstree, BackendBootc})
	if u.Backend == BackendBootc && u.Source != SourceOrigin {
		k.failRel("updates.backend", []string{"updates.source"}, "\"bootc\" needs updates.source = \"origin\" (bootc follows the booted image), got %q", u.Source)
	}
}

func (k *checker) staging(s *Staging) {
	k.oneOf("staging.io_scheduling_class", s.IOSchedulingClass, ioClass)
	k.intRange("staging.io_scheduling_priority", s.IOSchedulingPriority, 0, 7)
	k.intRange("staging.io_weight", s.IOWeight, 1, 10000)
	if s.CPUWeight > 10000 {
		k.fail("staging.cpu_weight", "must be 1-10000 or \"idle\", got %d", s.CPUWeight)
	}
	k.intRange("staging.nice", s.Nice, -20, 19)
	if s.MemoryHigh != 0 && s.MemoryHigh < minMemory {
		k.fail("staging.memory_high", "must be \"infinity\" or >= 1M, got %s bytes (missing K/M/G suffix?)", strconv.FormatUint(uint64(s.MemoryHigh), 10))
	}
	if s.IOWriteBandwidthMax != 0 && s.IOWriteBandwidthMax < minBandwidth {
		k.fail("staging.io_write_bandwidth_max", "must be \"auto\", \"\" (no cap) or >= 1M, got %s bytes/s (missing K/M/G suffix?)", strconv.FormatUint(uint64(s.IOWriteBandwidthMax), 10))
	}
	k.oneOf("staging.scheduler", s.Scheduler, ioScheds)
	if s.IOSchedulingClass == "idle" && s.Scheduler != "" && s.Scheduler != "bfq" {
		k.warn("staging.scheduler", "io_scheduling_class \"idle\" only has an effect with bfq; scheduler is %q", s.Scheduler)
	}
	if s.NRRequests != 0 && s.NRRequests < 4 {
		// The block layer's minimum (BLKDEV_MIN_RQ); it would round up.
		k.fail("staging.nr_requests", "must be 0 (leave alone) or >= 4, got %d", s.NRRequests)
	}
	if s.MaxSectorsKB != 0 && s.MaxSectorsKB < 4 {
		// One page: the kernel refuses anything smaller.
		k.fail("staging.max_sectors_kb", "must be 0 (leave alone) or >= 4, got %d", s.MaxSectorsKB)
	}
	for i, p := range s.Paths {
		k.absPath(fmt.Sprintf("staging.paths[%d]", i), p)
	}
	k.nonNegative("staging.etcd_io_latency_target", s.EtcdIOLatencyTarget)
	if s.EtcdIOLatencyTarget > 0 && k.c.Etcd.LocalUnit == "" {
		k.failRel("staging.etcd_io_latency_target", []string{"etcd.local_unit"}, "needs etcd.local_unit (the unit to set it on)")
	}
	k.positive("staging.timeout", s.Timeout)
	k.nonNegative("staging.busy_wait", s.BusyWait)
	if s.PaceForeign && k.c.Updates.Enabled {
		// The agent's own stagings are paced already, and a foreign
		// updater (what companion mode paces) would fight it for the
		// staged deployment.
		k.failRel("staging.pace_foreign", []string{"updates.enabled"}, "companion mode: needs updates.enabled = false (another updater drives the host)")
	}
	k.iocost(s)
}

func (k *checker) guard(g *Guard) {
	if g.MetricsURL != "" {
		if err := checkURL(g.MetricsURL, false); err != nil {
			k.fail("guard.metrics_url", "%v", err)
		}
	}
	k.guardTLS(g)
	k.positive("guard.metrics_interval", g.MetricsInterval)
	k.nonNegative("guard.fsync_p99_threshold", g.FsyncP99Threshold)
	if g.LatencyFactor <= 1 {
		k.fail("guard.latency_factor", "must be > 1, got %v", g.LatencyFactor)
	}
	if g.RateLoopLatencyFactor <= 1 {
		k.fail("guard.rate_loop_latency_factor", "must be > 1, got %v", g.RateLoopLatencyFactor)
	}
	if g.ThawFactor < 1 || (g.LatencyFactor > 1 && g.ThawFactor > g.LatencyFactor) {
		k.failRel("guard.thaw_factor", []string{"guard.latency_factor"}, "must be >= 1 and <= guard.latency_factor (%v), got %v", g.LatencyFactor, g.ThawFactor)
	}
	if g.IOPressureThreshold <= 0 || g.IOPressureThreshold > 100 {
		k.fail("guard.io_pressure_threshold", "must be > 0 and <= 100 (percent), got %v", g.IOPressureThreshold)
	}
	k.positive("guard.interval", g.Interval)
	k.positive("guard.window", g.Window)
	if g.Interval > 0 && g.Window < g.Interval {
		k.failRel("guard.window", []string{"guard.interval"}, "must be >= guard.interval (%s), got %q", g.Interval, g.Window.String())
	}
	k.positive("guard.min_freeze", g.MinFreeze)
	k.positive("guard.max_freeze", g.MaxFreeze)
	if g.MinFreeze > 0 && g.MaxFreeze > 0 && g.MinFreeze > g.MaxFreeze {
		k.failRel("guard.min_freeze", []string{"guard.max_freeze"}, "must be <= guard.max_freeze (%s), got %q", g.MaxFreeze, g.MinFreeze.String())
	}
	if g.MinRunShare <= 0 || g.MinRunShare > 1 {
		k.fail("guard.min_run_share", "must be > 0 and <= 1, got %v", g.MinRunShare)
	}
	k.positive("guard.max_total_pause", g.MaxTotalPause)
	if g.LatencyTarget <= 1 || (g.LatencyFactor > 1 && g.LatencyTarget > g.LatencyFactor) {
		k.failRel("guard.latency_target", []string{"guard.latency_factor"}, "must be > 1 and <= guard.latency_factor (%v), got %v", g.LatencyFactor, g.LatencyTarget)
	}
	k.positive("guard.rate_probe_interval", g.RateProbeInterval)
	if g.RateStart == 0 || g.RateStart == BandwidthAuto || g.RateStart < minBandwidth {
		k.fail("guard.rate_start", "must be a rate >= 1M, got %q", g.RateStart.String())
	}
	if g.RateMin == BandwidthAuto || g.RateMin > g.RateStart {
		k.failRel("guard.rate_min", []string{"guard.rate_start"}, "must be \"\" (none) or a rate <= rate_start (%s), got %q", g.RateStart.String(), g.RateMin.String())
	}
	if g.RateMinShare < 0 || g.RateMinShare > 1 {
		k.fail("guard.rate_min_share", "must be 0 (rate_start is the floor) to 1, got %v", g.RateMinShare)
	}
	k.intRange("guard.rate_io_size_kib", g.RateIOSizeKiB, 0, 1<<20)
	k.positive("guard.baseline_max_age", g.BaselineMaxAge)
	k.positive("guard.learn_period", g.LearnPeriod)
}

func (k *checker) lock(l *Lock) {
	if !nameRe.MatchString(l.Group) {
		k.fail("lock.group", "must match %s, got %q", nameRe, l.Group)
	}
	if l.Slots < 1 {
		k.fail("lock.slots", "must be >= 1, got %d", l.Slots)
	}
	if !strings.HasPrefix(l.KeyPrefix, "/") || strings.HasSuffix(l.KeyPrefix, "/") {
		k.fail("lock.key_prefix", "must start with \"/\" and not end with one, got %q", l.KeyPrefix)
	}
	switch ttl := l.RebootLeaseTTL.D(); {
	case ttl < MinRebootLeaseTTL:
		k.fail("lock.reboot_lease_ttl", "must be >= %s (etcd raises shorter lease TTLs to its minimum), got %q", Duration(MinRebootLeaseTTL), l.RebootLeaseTTL.String())
	case ttl%time.Second != 0:
		k.fail("lock.reboot_lease_ttl", "must be whole seconds (etcd lease TTLs are), got %q", l.RebootLeaseTTL.String())
	}
	// min_interval is an etcd lease TTL too.
	if d := l.MinInterval.D(); d != 0 && (d < MinRebootLeaseTTL || d%time.Second != 0) {
		k.fail("lock.min_interval", "must be \"0s\" or whole seconds >= %s (it is an etcd lease TTL), got %q", Duration(MinRebootLeaseTTL), l.MinInterval.String())
	}
}

// checkURL accepts http(s)://host:port[/path]; an etcd endpoint needs the
// port and no path.
func checkURL(s string, endpoint bool) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("must be an http:// or https:// URL, got %q", s)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("has no host: %q", s)
	}
	if endpoint {
		if u.Port() == "" {
			return fmt.Errorf("must name host and port (e.g. https://10.0.0.1:2379), got %q", s)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return fmt.Errorf("must not have a path or query, got %q", s)
		}
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("bad port in %q", s)
		}
	}
	return nil
}

func (k *checker) reboot(r *Reboot) {
	k.oneOf("reboot.strategy", r.Strategy, []string{StrategyImmediate, StrategyPeriodic})
	if _, err := r.Location(); err != nil || r.TimeZone == "" {
		k.fail("reboot.time_zone", "unknown time zone %q (want an IANA name like \"Europe/Berlin\", \"UTC\" or \"Local\")", r.TimeZone)
	}
	for i, w := range r.Windows {
		key := fmt.Sprintf("reboot.windows[%d].", i)
		if _, err := parseDays(w.Days); err != nil {
			k.fail(key+"days", "%v", err)
		}
		startKey, lengthKey := key+"start", key+"length"
		if w.Start == "" && w.StartTime != "" {
			startKey = key + "start_time"
		}
		if w.Length == 0 && w.LengthMinutes != 0 {
			lengthKey = key + "length_minutes"
		}
		switch {
		case w.Start != "" && w.StartTime != "":
			k.fail(key+"start_time", "set start or start_time (zincati's spelling), not both")
		case w.Length != 0 && w.LengthMinutes != 0:
			k.fail(key+"length_minutes", "set length or length_minutes (zincati's spelling), not both")
		}
		if _, _, err := parseClock(w.StartClock()); err != nil {
			k.fail(startKey, "%v", err)
		}
		if err := checkWindowLength(w.Len()); err != nil {
			k.fail(lengthKey, "%v", err)
		}
	}
	switch {
	case r.Strategy == StrategyPeriodic && len(r.Windows) == 0:
		k.failRel("reboot.windows", []string{"reboot.strategy"}, "strategy \"periodic\" needs at least one window")
	case r.Strategy == StrategyImmediate && len(r.Windows) > 0:
		k.warn("reboot.windows", "ignored while reboot.strategy is \"immediate\"")
	}
	k.commands("reboot.hooks", r.Hooks)
	k.loggedInDelay(r.LoggedInDelay)
}

// MaxLoggedInDelay bounds reboot.logged_in_delay: the node holds its
// group's reboot slot through the delay, so every other node of the group
// waits that long too.
const MaxLoggedInDelay = time.Hour

// loggedInDelay bounds the wait for logged-in users: at most
// MaxLoggedInDelay, and with the etcd lock shorter than the reboot budget
// (lock.reboot_lease_ttl), which is how long the group lets a holder be
// gone; a wait beyond it would hold the slot longer than a reboot may take.
func (k *checker) loggedInDelay(d Duration) {
	const key = "reboot.logged_in_delay"
	switch ttl := k.c.Lock.RebootLeaseTTL; {
	case d < 0:
		k.fail(key, "must be >= 0, got %q", d.String())
	case d.D() > MaxLoggedInDelay:
		k.fail(key, "must be <= %s (the node holds its group's reboot slot while it waits), got %q", Duration(MaxLoggedInDelay), d.String())
	case k.c.Lock.Enabled && d >= ttl:
		k.failRel(key, []string{"lock.reboot_lease_ttl"}, "must be shorter than lock.reboot_lease_ttl (%s, the reboot budget: the node holds its slot while it waits), got %q", ttl, d.String())
	}
}

// commands checks hooks and gate commands: argv by absolute path (no shell,
// no PATH) and a timeout.
func (k *checker) commands(key string, cmds []Hook) {
	for i, h := range cmds {
		key := fmt.Sprintf("%s[%d].", key, i)
		if len(h.Argv) == 0 {
			k.fail(key+"argv", "must not be empty (argv[0] is the program)")
		} else if !filepath.IsAbs(h.Argv[0]) {
			k.fail(key+"argv", "argv[0] must be an absolute path (they run without a shell or PATH), got %q", h.Argv[0])
		}
		k.positive(key+"timeout", h.Timeout)
	}
}

func (k *checker) metrics(m *Metrics) {
	if m.Listen == "" {
		return
	}
	if p, ok := strings.CutPrefix(m.Listen, "unix:"); ok {
		k.absPath("metrics.listen", p)
		return
	}
	host, port, err := net.SplitHostPort(m.Listen)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil || n < 1 || n > 65535 || strings.ContainsAny(host, "/ ") {
		k.fail("metrics.listen", "must be \"unix:/path\", \"host:port\" or \"\" (off), got %q", m.Listen)
	}
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	return strings.Join(q, ", ")
}
