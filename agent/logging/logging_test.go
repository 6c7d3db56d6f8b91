package logging

import (
	"log/slog"
	"os"
	"strings"
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
	if gotMsg != "waiting for slot lock.group=control-plane lock.position=2" || gotPri != journal.PriWarning {
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

// The message text carries the record's own attributes (what `journalctl
// -u update-agent` shows), quoted where needed; MESSAGE_ID is a field only.
func TestJournalMessageText(t *testing.T) {
	var gotMsg string
	var gotVars map[string]string
	h := &JournalHandler{level: slog.LevelInfo, mu: &sync.Mutex{}, send: func(m string, _ journal.Priority, v map[string]string) error {
		gotMsg, gotVars = m, v
		return nil
	}}
	log := slog.New(h).With("node", "cp1")
	log.Info("reboot gate", "gate", "alerts", "hold", true, "reason", `firing: EtcdDown "x"`, "empty", "",
		slog.Group("q", "ahead", 2), MessageID(IDHeld))
	want := `reboot gate gate=alerts hold=true reason="firing: EtcdDown \"x\"" empty="" q.ahead=2`
	if gotMsg != want {
		t.Errorf("message\n got %s\nwant %s", gotMsg, want)
	}
	if gotVars["MESSAGE_ID"] != IDHeld || gotVars["SUMMARY"] != "reboot gate" || gotVars["REASON"] != `firing: EtcdDown "x"` || gotVars["NODE"] != "cp1" || gotVars["Q_AHEAD"] != "2" {
		t.Errorf("fields: %v", gotVars)
	}
	if _, ok := gotVars["MESSAGE_ID_"]; ok || gotVars["FIELD"] != "" {
		t.Errorf("message_id leaked into a field: %v", gotVars)
	}
}

func TestMessageIDsAreValid(t *testing.T) {
	seen := map[string]bool{}
	for _, id := range []string{IDStaged, IDSlotTaken, IDRebooting, IDUpdated, IDSetAside, IDHeld} {
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" || seen[id] {
			t.Errorf("MESSAGE_ID %q: want 32 lower-case hex digits, each once", id)
		}
		seen[id] = true
	}
}

// docs/operations.md's "Reading the journal" lists every MESSAGE_ID with its
// event.
func TestOperationsDocListsMessageIDs(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{IDStaged, IDSlotTaken, IDRebooting, IDUpdated, IDSetAside, IDHeld} {
		if !strings.Contains(string(b), "`"+id+"`") {
			t.Errorf("docs/operations.md lacks MESSAGE_ID %s", id)
		}
	}
}
