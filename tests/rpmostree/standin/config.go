// Package standin is a stand-in for rpm-ostree and rpm-ostreed on hosts that
// cannot install rpm-ostree (Debian): the same CLI contract (flags, JSON keys,
// messages, exit codes), backed by real ostree I/O through Debian's `ostree`
// CLI. The daemon does the writing, as rpm-ostreed does, so an I/O policy on
// rpm-ostreed.service governs the writer.
package standin

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Environment variables read by the CLI, the daemon and the shutdown hook.
const (
	EnvRunDir     = "RPMOSTREE_STANDIN_RUNDIR"     // staged state, lock, driver, socket
	EnvSocket     = "RPMOSTREE_STANDIN_SOCKET"     // daemon socket; default RUNDIR/daemon.sock
	EnvSysroot    = "RPMOSTREE_STANDIN_SYSROOT"    // host repo, deployments, booted/rollback
	EnvOstree     = "RPMOSTREE_STANDIN_OSTREE"     // ostree binary
	EnvRebootCmd  = "RPMOSTREE_STANDIN_REBOOT_CMD" // argv split on spaces, no shell
	EnvPullDelay  = "RPMOSTREE_STANDIN_TEST_PULL_DELAY"
	EnvInhibitors = "RPMOSTREE_STANDIN_INHIBITORS_FILE"
	EnvCallerUnit = "RPMOSTREE_STANDIN_CALLER_UNIT"
	// EnvMode is "sysroot" (deployments are the booted ostree sysroot's) or
	// "standin" (the stand-in's own records under SYSROOT); default
	// sysroot when the kernel booted an ostree deployment (ostree= on
	// /proc/cmdline), else standin.
	EnvMode = "RPMOSTREE_STANDIN_MODE"
)

// Defaults: /run is a tmpfs on a real host, so the staged deployment and its
// lock vanish on any reboot, as /run/ostree/staged-deployment does.
const (
	DefaultRunDir  = "/run/rpm-ostree-standin"
	DefaultSysroot = "/var/lib/rpm-ostree-standin"
)

// Config locates the stand-in's state.
type Config struct {
	RunDir    string
	Socket    string
	Sysroot   string
	Ostree    string
	RebootCmd []string
	// PullDelay makes every pull wait first (cancellable): a test-only
	// throttle so a transaction can be cancelled mid-flight.
	PullDelay time.Duration
	// RealSysroot: deployments are the booted ostree sysroot's (EnvMode).
	RealSysroot bool
	// InhibitorsFile, when set, replaces logind's ListInhibitors with a JSON
	// list of {"what","who","why","mode"} objects (tests without systemd).
	InhibitorsFile string
}

// FromEnv reads the configuration from the environment.
func FromEnv() Config {
	c := Config{
		RunDir:         env(EnvRunDir, DefaultRunDir),
		Sysroot:        env(EnvSysroot, DefaultSysroot),
		Ostree:         env(EnvOstree, "ostree"),
		RebootCmd:      strings.Fields(env(EnvRebootCmd, "systemctl reboot")),
		InhibitorsFile: os.Getenv(EnvInhibitors),
	}
	switch os.Getenv(EnvMode) {
	case "sysroot":
		c.RealSysroot = true
	case "standin":
	default:
		cmdline, _ := os.ReadFile("/proc/cmdline")
		c.RealSysroot = bootedOstree(string(cmdline))
	}
	c.Socket = env(EnvSocket, filepath.Join(c.RunDir, "daemon.sock"))
	if d, err := time.ParseDuration(os.Getenv(EnvPullDelay)); err == nil {
		c.PullDelay = d
	}
	return c
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Paths inside the sysroot and run dir.
func (c Config) repo() string { return filepath.Join(c.Sysroot, "ostree", "repo") }
func (c Config) deploymentsFile() string {
	return filepath.Join(c.Sysroot, "ostree", "standin-deployments.json")
}
func (c Config) stagedFile() string { return filepath.Join(c.RunDir, "staged-deployment.json") }
func (c Config) driverFile() string { return filepath.Join(c.RunDir, "update-driver.json") }

func (c Config) deployDir(osname string) string {
	return filepath.Join(c.Sysroot, "ostree", "deploy", osname, "deploy")
}

func (c Config) checkoutDir(d Dep) string {
	return filepath.Join(c.deployDir(d.OSName), d.dirName())
}

// bootedOstree reports whether a kernel command line booted an ostree
// deployment. /run/ostree-booted alone does not say so: tests make it on
// plain hosts for the agent's own check.
func bootedOstree(cmdline string) bool {
	for _, f := range strings.Fields(cmdline) {
		if strings.HasPrefix(f, "ostree=") {
			return true
		}
	}
	return false
}
