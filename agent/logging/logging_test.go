package logging

import (
	"log/slog"
	"sync"
	"testing"

	"github.com/coreos/go-systemd/v22/journal"
)

func TestJournalHandlerFields(t *testing.T) {
	var gotMsg string
	var gotPri journal.Priority
	var gotVars map[string]string
	h := &JournalHandler{level: slog.LevelInfo, mu: &sync.Mutex{}, send: func(m string, p journal.Priority, v map[string]string) error {
		gotMsg, gotPri, gotVars = m, p, v
		return nil
	}}
	log := slog.New(h).With("state", "staging", "unit", "u1").WithGroup("lock")
	log.Warn("waiting for slot", "group", "control-plane", "position", 2)
	if gotMsg != "waiting for slot" || gotPri != journal.PriWarning {
		t.Errorf("msg=%q pri=%v", gotMsg, gotPri)
	}
	want := map[string]string{"STATE": "staging", "LOCK_GROUP": "control-plane", "LOCK_POSITION": "2", "SYSLOG_IDENTIFIER": "update-agent", "UNIT": "u1"}
	for k, v := range want {
		if gotVars[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, gotVars[k], v, gotVars)
		}
	}
	gotMsg = ""
	log.Debug("hidden")
	if gotMsg != "" {
		t.Error("debug record sent at info level")
	}
}

func TestFieldName(t *testing.T) {
	for in, want := range map[string]string{"target-checksum": "TARGET_CHECKSUM", "_x": "X", "9a": "A", "ok": "OK", "": "FIELD"} {
		if got := fieldName(in); got != want {
			t.Errorf("fieldName(%q) = %q, want %q", in, got, want)
		}
	}
}
