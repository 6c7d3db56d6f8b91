package config

import (
	"strings"
	"testing"
)

func TestZincatiHint(t *testing.T) {
	for _, tt := range []struct{ key, want string }{
		{"updates.strategy", "use reboot.strategy"},
		{"updates.periodic", "reboot.time_zone and [[reboot.windows]]"},
		{"updates.periodic.time_zone", "use reboot.time_zone"},
		{"updates.periodic.window.start_time", "use [[reboot.windows]]"},
		{"updates.fleet_lock.base_url", "etcd.endpoints and lock.group"},
		{"agent.timing.steady_interval_secs", "agent.check_interval"},
		{"updates.strategyx", ""},
		{"lock.slot", ""},
	} {
		if got := zincatiHint(tt.key); (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("zincatiHint(%q) = %q, want it to say %q", tt.key, got, tt.want)
		}
	}
}

func TestRemovedHint(t *testing.T) {
	for _, tt := range []struct{ key, want string }{
		{"staging.iocost_etcd_feedback", "delete the line"},
		{"staging.iocost_etcd_feedbackx", ""},
		{"staging.iocost", ""},
	} {
		if got := removedHint(tt.key); (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("removedHint(%q) = %q, want it to say %q", tt.key, got, tt.want)
		}
	}
}

func TestPlainTypeError(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"incompatible types: TOML value has type string; destination has type integer", "must be a whole number (no quotes), got a string"},
		{"incompatible types: TOML value has type int64; destination has type string", "must be a string in quotes, got a whole number"},
		{"incompatible types: TOML value has type []any; destination has type boolean", "must be true or false (no quotes), got a list"},
		{"incompatible types: TOML value has type map[string]any; destination has type slice", `must be a list, like ["a", "b"], got a table`},
		{"incompatible types: TOML value has type float64; destination has type integer", "must be a whole number (no quotes), got a decimal number"},
		{"some other message", "some other message"},
	} {
		if got := plainTypeError(tt.in); got != tt.want {
			t.Errorf("plainTypeError(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
