package gates

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestEvaluate(t *testing.T) {
	boom := errors.New("connection refused")
	tests := []struct {
		name     string
		in       Inputs
		hold     bool
		contains string
	}{
		{name: "nothing wrong", in: Inputs{}, hold: false},
		{name: "NOSPACE alarm", in: Inputs{AlarmsEnabled: true, Alarms: []Alarm{{Member: "cp2", Type: "NOSPACE"}}}, hold: true, contains: "NOSPACE on cp2"},
		{name: "alarms unreadable", in: Inputs{AlarmsEnabled: true, AlarmsErr: boom}, hold: true, contains: "cannot list etcd alarms"},
		{name: "no etcd: alarms not evaluated", in: Inputs{AlarmsErr: boom}, hold: false},
		{name: "alerts off ignores an error", in: Inputs{AlertsErr: boom}, hold: false},
		{name: "alertmanager unreachable holds", in: Inputs{AlertsEnabled: true, AlertsErr: boom}, hold: true, contains: "cannot read alerts"},
		{name: "firing alert, no regexp", in: Inputs{AlertsEnabled: true, Alerts: []Alert{{Name: "EtcdHighFsync", State: "active"}}}, hold: true, contains: "firing: EtcdHighFsync"},
		{name: "silenced alert", in: Inputs{AlertsEnabled: true, Alerts: []Alert{{Name: "EtcdHighFsync", State: "suppressed", SilencedBy: []string{"s1"}}}}, hold: false},
		{name: "inhibited alert", in: Inputs{AlertsEnabled: true, Alerts: []Alert{{Name: "X", State: "suppressed", InhibitedBy: []string{"i1"}}}}, hold: false},
		{name: "active but silenced list set", in: Inputs{AlertsEnabled: true, Alerts: []Alert{{Name: "X", State: "active", SilencedBy: []string{"s"}}}}, hold: false},
		{name: "unprocessed alert", in: Inputs{AlertsEnabled: true, Alerts: []Alert{{Name: "X", State: "unprocessed"}}}, hold: false},
		{name: "regexp excludes", in: Inputs{AlertsEnabled: true, AlertRegexp: regexp.MustCompile("^Etcd"), Alerts: []Alert{{Name: "Watchdog", State: "active"}}}, hold: false},
		{name: "regexp matches", in: Inputs{AlertsEnabled: true, AlertRegexp: regexp.MustCompile("^Etcd"), Alerts: []Alert{{Name: "Watchdog", State: "active"}, {Name: "EtcdNoLeader", State: "active"}}}, hold: true, contains: "firing: EtcdNoLeader"},
		{name: "command exit 0", in: Inputs{Commands: []CommandResult{{Argv: []string{"/bin/true"}}}}, hold: false},
		{name: "command exit 1", in: Inputs{Commands: []CommandResult{{Argv: []string{"/bin/false"}, ExitCode: 1, Err: errors.New("exit status 1")}}}, hold: true, contains: "/bin/false: exit status 1"},
		{name: "command timeout", in: Inputs{Commands: []CommandResult{{Argv: []string{"/bin/sleep", "9"}, ExitCode: -1, TimedOut: true, Err: errors.New("killed")}}}, hold: true, contains: "timed out"},
		{name: "spacing active", in: Inputs{SpacingEnabled: true, Spacing: Spacing{Active: true, By: "cp1", Left: 90 * time.Second}}, hold: true, contains: "cp1 released its reboot slot recently; next reboot of the group in 1m30s"},
		{name: "spacing clear", in: Inputs{SpacingEnabled: true}, hold: false},
		{name: "spacing unreadable", in: Inputs{SpacingEnabled: true, SpacingErr: boom}, hold: true, contains: "cannot read the group's last release"},
		{name: "spacing off ignores error", in: Inputs{SpacingErr: boom}, hold: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hold, why := Holding(Evaluate(tt.in))
			if hold != tt.hold {
				t.Fatalf("hold = %v (%q), want %v", hold, why, tt.hold)
			}
			if !strings.Contains(why, tt.contains) {
				t.Fatalf("reason %q does not contain %q", why, tt.contains)
			}
		})
	}
}

func TestHoldingJoinsEveryReason(t *testing.T) {
	rs := Evaluate(Inputs{
		AlarmsEnabled: true,
		Alarms:        []Alarm{{Member: "cp1", Type: "CORRUPT"}},
		Commands:      []CommandResult{{Argv: []string{"/x"}, Err: errors.New("exit status 3")}},
	})
	hold, why := Holding(rs)
	if !hold || !strings.Contains(why, "etcd-alarms: active etcd alarm: CORRUPT on cp1") || !strings.Contains(why, "command: /x: exit status 3") {
		t.Fatalf("got %v %q", hold, why)
	}
	if len(rs) != 2 {
		t.Fatalf("want one result per evaluated gate, got %d", len(rs))
	}
}
