package config

import (
	"fmt"
	"regexp"
	"strings"
)

// zincatiKeys are zincati's keys that the agent spells differently (or
// does differently), for a fragment copied from a zincati host: the error
// names what to write instead. identity.* and cincinnati.base_url are
// zincati's own spelling here and need none.
var zincatiKeys = []struct{ key, hint string }{
	{"updates.strategy", `zincati's key: use reboot.strategy ("immediate" or "periodic"); zincati's "fleet_lock" is the agent's etcd lock, lock.enabled (on by default)`},
	{"updates.periodic.time_zone", "zincati's key: use reboot.time_zone"},
	{"updates.periodic.window", "zincati's key: use [[reboot.windows]] (days, start_time and length_minutes read as in zincati)"},
	{"updates.periodic", `zincati's table: use reboot.strategy = "periodic", reboot.time_zone and [[reboot.windows]]`},
	{"updates.fleet_lock", "zincati's table: the agent takes its reboot slot in etcd itself: set etcd.endpoints and lock.group; zincati nodes can use the agent's FleetLock server (fleetlock.listen)"},
	{"agent.timing", "zincati's table: use agent.check_interval (a duration, e.g. \"5m\")"},
}

// zincatiHint is the message for key (as written, "updates.periodic" or a
// key below it) when it is zincati's; "" otherwise.
func zincatiHint(key string) string {
	for _, z := range zincatiKeys {
		if key == z.key || strings.HasPrefix(key, z.key+".") {
			return z.hint
		}
	}
	return ""
}

// removedKeys are keys an older agent read and this one does not: the
// error says so and what to do, not "unknown key" (a fragment kept from
// then is no typo).
var removedKeys = []struct{ key, hint string }{
	{"staging.iocost_etcd_feedback", "removed: the vrate ceiling it set from etcd's latency sank to its floor and staging crawled without holding etcd (docs/benchmarks.md); delete the line"},
}

// removedHint is the message for key when it was removed; "" otherwise.
func removedHint(key string) string {
	for _, r := range removedKeys {
		if key == r.key || strings.HasPrefix(key, r.key+".") {
			return r.hint
		}
	}
	return ""
}

// badTypeRe is the toml package's type error, in Go's words.
var badTypeRe = regexp.MustCompile(`^incompatible types: TOML value has type (.+); destination has type (.+)$`)

// plainTypeError says a type error in the configuration's words ("must be a
// whole number, got a string"); other messages are returned as they are.
func plainTypeError(msg string) string {
	m := badTypeRe.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	want, ok := map[string]string{
		"integer": "a whole number (no quotes)", "float": "a number (no quotes)",
		"boolean": "true or false (no quotes)", "string": `a string in quotes`,
		"primitive (string-like)": "a string in quotes", "slice": `a list, like ["a", "b"]`,
		"map": "a table",
	}[m[2]]
	if !ok {
		want = "a " + m[2]
	}
	return fmt.Sprintf("must be %s, got %s", want, tomlTypeWords(m[1]))
}

// tomlTypeWords names the Go type the toml package decoded a value to as
// the TOML value it was.
func tomlTypeWords(t string) string {
	switch {
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "int"):
		return "a whole number"
	case strings.HasPrefix(t, "float"):
		return "a decimal number"
	case t == "bool":
		return "true/false"
	case strings.HasPrefix(t, "[]map"):
		return "a list of tables"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map"):
		return "a table"
	case strings.HasPrefix(t, "time.") || strings.HasPrefix(t, "toml.Local"):
		return "a date or time"
	}
	return t
}

// suggestSection offers the section closest to a misspelt top-level table.
func suggestSection(name string) string {
	best, bestD := "", 3
	seen := map[string]bool{}
	for _, p := range KeyPaths() {
		sec := p[:strings.Index(p, ".")]
		if seen[sec] {
			continue
		}
		seen[sec] = true
		if d := editDistance(name, sec); d < bestD {
			best, bestD = sec, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean [%s]?)", best)
}
