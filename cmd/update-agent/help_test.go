package main

import (
	"strings"
	"testing"
)

// Every subcommand and verb answers -h with its usage and examples, exit 0
// (lock -h and fleetlock -h were usage errors).
func TestHelpHasExamples(t *testing.T) {
	var cases [][]string
	for _, c := range commands() {
		if vs, ok := verbs[c.name]; ok {
			cases = append(cases, []string{c.name, "-h"}, []string{c.name, "--help"})
			for _, v := range vs {
				cases = append(cases, []string{c.name, v.name, "-h"})
			}
			continue
		}
		cases = append(cases, []string{c.name, "-h"})
	}
	for _, args := range cases {
		code, out, stderr := runIn(args...)
		if code != exitOK || !strings.Contains(out+stderr, "Examples:\n  update-agent ") && !strings.Contains(out+stderr, "Examples:\n  systemctl ") {
			t.Errorf("%q: exit %d, want 0 with examples:\n%s%s", args, code, out, stderr)
		}
	}
	for name := range examples {
		cmd, verb, _ := strings.Cut(name, " ")
		found := false
		for _, c := range commands() {
			found = found || c.name == cmd && (verb == "" || verbExists(cmd, verb))
		}
		if !found {
			t.Errorf("examples for %q, which is no subcommand", name)
		}
	}
}

func verbExists(cmd, verb string) bool {
	for _, v := range verbs[cmd] {
		if v.name == verb {
			return true
		}
	}
	return false
}
