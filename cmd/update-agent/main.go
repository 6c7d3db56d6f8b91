// Command update-agent updates an rpm-ostree host without disturbing the etcd
// member on it, and reboots the cluster one safe node at a time.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/update-agent/update-agent/agent/adapters"
	"github.com/update-agent/update-agent/agent/etcdclient"
	"github.com/update-agent/update-agent/agent/graph"
	"github.com/update-agent/update-agent/agent/owner"
)

// Exit codes: distinct so that systemd and scripts can tell them apart.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitWaiting: doctor found nothing wrong, but reboots are held now.
	exitWaiting   = 3
	exitBadConfig = 78 // EX_CONFIG from sysexits.h; RestartPreventExitStatus in the unit
	// exitForeignDriver: another update driver (zincati) owns this host,
	// or bootc's own updater can reboot it; like a bad configuration,
	// restarting cannot fix it (also in RestartPreventExitStatus).
	exitForeignDriver = 79
	// exitMemberNoLock: lock.enabled = false on a host found to run an etcd
	// member; only the configuration can fix it (RestartPreventExitStatus).
	exitMemberNoLock = 80
	// exitWrongStream: stage-once staged an update graph's release that
	// turned out to be on another stream, and discarded it.
	exitWrongStream = 81
)

func isForeignUpdater(err error) bool { return errors.Is(err, owner.ErrForeignUpdater) }

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "0.0.0-dev"

// usageError is returned for bad command lines; it maps to exitUsage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// configError is returned when the configuration cannot be loaded; it maps
// to exitBadConfig.
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }
func (e configError) Unwrap() error { return e.err }

// command is one subcommand. run gets the arguments after the subcommand name.
type command struct {
	name    string
	summary string
	run     func(env *cmdEnv, args []string) error
}

// cmdEnv is what every subcommand gets from main: output streams, so tests
// can run subcommands in-process.
type cmdEnv struct {
	stdout, stderr io.Writer
}

func commands() []command {
	return []command{
		{"daemon", "run the agent (what update-agent.service runs)", runDaemon},
		{"check-config", "print the merged configuration and where each value came from", runCheckConfig},
		{"doctor", "check etcd, the local member, rpm-ostree, disks and the lock, one line each; exit 1 on a failure, 3 when reboots are held now", runDoctor},
		{"status", "show what the daemon does and waits for (--json)", runStatus},
		{"update-now", "ask the daemon to check for an update and stage it now", runUpdateNow},
		{"stage-once", "stage one update now under the staging policy and latency guard; no reboot", runStageOnce},
		{"lock", "show the reboot slots (lock status) or free a node's slot (lock release <node>)", runLock},
		{"fleetlock", "serve zincati's FleetLock protocol from the reboot semaphore (fleetlock serve)", runFleetLock},
		{"version", "print the version", runVersion},
	}
}

func main() {
	os.Exit(exitCode(run(&cmdEnv{stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]), os.Stderr))
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(stderr, "update-agent: %v\n", err)
	var ue usageError
	var ce configError
	var ece *etcdclient.ConfigError
	var dw doctorWaiting
	var mn memberNoLock
	switch {
	case errors.As(err, &dw):
		return exitWaiting
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &ce), errors.As(err, &ece):
		// A TLS or password file found bad only when the client is built
		// is still a configuration error: systemd must not restart into it.
		return exitBadConfig
	case errors.Is(err, adapters.ErrForeignDriver), isForeignUpdater(err):
		return exitForeignDriver
	case errors.As(err, &mn):
		return exitMemberNoLock
	case errors.Is(err, graph.ErrWrongStream):
		return exitWrongStream
	default:
		return exitFailure
	}
}

func run(env *cmdEnv, args []string) error {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		return runVersion(env, args[1:]) // as `update-agent version`
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(env.stdout)
		if len(args) == 0 {
			return usageError{"no subcommand given"}
		}
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(env, args[1:])
		}
	}
	return usageError{fmt.Sprintf("unknown subcommand %q (see update-agent --help)", args[0])}
}

func printUsage(w io.Writer) {
	cs := commands()
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	var b strings.Builder
	b.WriteString("Usage: update-agent <subcommand> [options]\n\nSubcommands:\n")
	for _, c := range cs {
		fmt.Fprintf(&b, "  %-14s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun 'update-agent <subcommand> -h' for its options.\n")
	io.WriteString(w, b.String())
}

// newFlags returns a FlagSet whose errors become usage errors.
func newFlags(env *cmdEnv, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("update-agent "+name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = usageWithExamples(fs, name)
	return fs
}

// parseFlags parses args and maps flag errors to usageError.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("%s: unexpected arguments %q", fs.Name(), fs.Args())}
	}
	return nil
}

func runVersion(env *cmdEnv, args []string) error {
	fs := newFlags(env, "version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "update-agent %s\n", version)
	return nil
}
