// Package logging sets up the agent's slog logger: structured journal
// entries when stderr is connected to the journal (JOURNAL_STREAM matches),
// plain text otherwise.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/coreos/go-systemd/v22/journal"
)

// New returns the logger for the process: journal-native when stderr is the
// journal, text on w otherwise.
func New(w io.Writer, level slog.Level) *slog.Logger {
	if StderrIsJournal() && journal.Enabled() {
		return slog.New(NewJournalHandler(level))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// StderrIsJournal reports whether stderr is the stream systemd connected to
// the journal (see systemd.exec(5), $JOURNAL_STREAM).
func StderrIsJournal() bool {
	ok, err := journal.StderrIsJournalStream()
	return ok && err == nil
}

// JournalHandler sends each record as one journal entry; attributes become
// upper-case fields (state -> STATE, target_checksum -> TARGET_CHECKSUM).
type JournalHandler struct {
	level  slog.Level
	attrs  []slog.Attr
	groups []string
	send   func(msg string, p journal.Priority, vars map[string]string) error
	mu     *sync.Mutex
}

// NewJournalHandler returns a handler writing to the local journal.
func NewJournalHandler(level slog.Level) *JournalHandler {
	return &JournalHandler{level: level, send: journal.Send, mu: &sync.Mutex{}}
}

func (h *JournalHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

// Handle sends r with its own attributes written into MESSAGE as well as
// in fields: `journalctl -u update-agent` shows MESSAGE alone, and "reboot
// gate" without the gate and its reason tells an operator nothing. The
// handler's context (node, group) stays in fields only (-o verbose).
func (h *JournalHandler) Handle(_ context.Context, r slog.Record) error {
	vars := map[string]string{"SYSLOG_IDENTIFIER": "update-agent"}
	for _, a := range h.attrs {
		addField(vars, "", a)
	}
	// SUMMARY is the bare message, for programs that match on it.
	vars[SummaryField] = r.Message
	prefix := strings.Join(h.groups, "_")
	var msg strings.Builder
	msg.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == messageIDKey {
			vars["MESSAGE_ID"] = a.Value.String()
			return true
		}
		addField(vars, prefix, a)
		appendText(&msg, strings.Join(h.groups, "."), a)
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.send(msg.String(), priority(r.Level), vars)
}

// SummaryField is the journal field holding the message without its
// attributes ("reboot gate"), for programs matching on the event.
const SummaryField = "SUMMARY"

// appendText writes a as " key=value" (groups dotted, values quoted when
// they need it), as slog's text handler would.
func appendText(b *strings.Builder, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	key := a.Key
	if prefix != "" && key != "" {
		key = prefix + "." + key
	} else if key == "" {
		key = prefix
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			appendText(b, key, g)
		}
		return
	}
	if key == "" {
		return
	}
	v := a.Value.String()
	if v == "" || strings.ContainsAny(v, " =\"\t\n\\") {
		v = strconv.Quote(v)
	}
	fmt.Fprintf(b, " %s=%s", key, v)
}

func (h *JournalHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	prefix := strings.Join(h.groups, "_")
	c.attrs = append([]slog.Attr{}, h.attrs...)
	for _, a := range attrs {
		if prefix != "" {
			a.Key = prefix + "_" + a.Key
		}
		c.attrs = append(c.attrs, a)
	}
	return &c
}

func (h *JournalHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.groups = append(append([]string{}, h.groups...), name)
	return &c
}

func addField(vars map[string]string, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	key := a.Key
	if prefix != "" {
		key = prefix + "_" + key
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			addField(vars, key, g)
		}
		return
	}
	if key == "" {
		return
	}
	vars[fieldName(key)] = a.Value.String()
}

// fieldName maps an attribute key to a valid journal field name: upper case
// letters, digits and underscores, not starting with an underscore.
func fieldName(k string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(k) {
		switch {
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := strings.TrimLeft(b.String(), "_0123456789")
	if s == "" {
		return "FIELD"
	}
	return s
}

func priority(l slog.Level) journal.Priority {
	switch {
	case l >= slog.LevelError:
		return journal.PriErr
	case l >= slog.LevelWarn:
		return journal.PriWarning
	case l >= slog.LevelInfo:
		return journal.PriInfo
	default:
		return journal.PriDebug
	}
}
