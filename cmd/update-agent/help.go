package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// examples are each subcommand's examples, printed by -h after its options.
var examples = map[string][]string{
	"daemon": {"systemctl enable --now update-agent    # how the daemon is meant to run", "update-agent daemon --debug            # in the foreground, with debug messages"},
	"check-config": {"update-agent check-config                # the merged configuration, each value's file",
		"update-agent check-config ./60-lock.toml # a fragment before it is installed, merged with the installed ones",
		"update-agent check-config --alone ./60-lock.toml # that fragment over the defaults only"},
	"doctor": {"update-agent doctor                     # exit 0: ready; 1: a check failed; 3: nothing wrong, reboots held now (WAIT)",
		"                                        # each line explained: /usr/share/doc/update-agent/docs/operations.md"},
	"status":          {"update-agent status", "update-agent status --json | jq .state"},
	"update-now":      {"update-agent update-now                 # check and stage now (windows and the lock still apply)"},
	"stage-once":      {"update-agent stage-once                 # stage what rpm-ostree upgrade would, gently; no reboot", "update-agent stage-once --deploy 3f2a...   # stage this commit"},
	"lock status":     {"update-agent lock status", "update-agent lock status --group control-plane --json"},
	"lock release":    {"update-agent lock release cp2           # free cp2's slot now", "update-agent lock release --group workers fleetlock:worker-7"},
	"fleetlock serve": {"update-agent fleetlock serve           # a FleetLock server without the daemon (usually the daemon serves it)"},
	"version":         {"update-agent version", "update-agent --version"},
}

// verbs are the second words of the subcommands that take one.
var verbs = map[string][]struct{ name, summary string }{
	"lock": {
		{"status", "show each group's holders, waiters, pending updates and spacing"},
		{"release", "free a node's reboot slot (or place in line) now"},
	},
	"fleetlock": {
		{"serve", "serve zincati's FleetLock protocol from the reboot semaphore"},
	},
}

// isHelp says whether arg asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

// printVerbs is `update-agent lock -h`: the verbs and their examples.
func printVerbs(w io.Writer, cmd string) {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: update-agent %s <verb> [options]\n\nVerbs:\n", cmd)
	for _, v := range verbs[cmd] {
		fmt.Fprintf(&b, "  %-9s %s\n", v.name, v.summary)
	}
	b.WriteString("\nExamples:\n")
	for _, v := range verbs[cmd] {
		for _, e := range examples[cmd+" "+v.name] {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	fmt.Fprintf(&b, "\nRun 'update-agent %s <verb> -h' for its options.\n", cmd)
	io.WriteString(w, b.String())
}

// usageWithExamples is a FlagSet's -h text: usage, options, examples.
func usageWithExamples(fs *flag.FlagSet, name string) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: update-agent %s [options]\n\nOptions:\n", name)
		fs.PrintDefaults()
		if ex := examples[name]; len(ex) > 0 {
			fmt.Fprintln(w, "\nExamples:")
			for _, e := range ex {
				fmt.Fprintf(w, "  %s\n", e)
			}
		}
	}
}
