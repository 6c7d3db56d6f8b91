package oplog

import (
	"bytes"
	"errors"
	"fmt"
)

// Output bounds. A caller that parses a command's whole stdout (rpm-ostree
// status --json is ~10-100 KB) gets up to DefaultMaxStdout and an error
// past it; any other command (a chatty drain hook) is never failed for
// printing a lot: its last DefaultStdoutTail bytes are kept for the log
// and the error. stderr only explains a failure, so its head and tail are
// enough.
const (
	DefaultMaxStdout  = 16 << 20
	DefaultStdoutTail = 1 << 20
	stderrHead        = 8 << 10
	stderrTail        = 56 << 10
	// errorStdoutTail is how much of the kept stdout an *Error carries.
	errorStdoutTail = 4 << 10
)

// ErrStdoutTooLong is wrapped by the *Error of a command run with
// WholeStdout whose stdout went past the Runner's MaxStdout: the caller
// must not parse a cut document.
var ErrStdoutTooLong = errors.New("stdout too long")

// capped keeps the first max bytes written and counts the rest. It never
// fails a write, so the command runs on instead of dying of EPIPE.
type capped struct {
	buf  bytes.Buffer
	max  int
	over int64
}

func (c *capped) Write(p []byte) (int, error) {
	room := max(c.max-c.buf.Len(), 0)
	if len(p) <= room {
		return c.buf.Write(p)
	}
	c.buf.Write(p[:room])
	c.over += int64(len(p) - room)
	return len(p), nil
}

// tail keeps the last max bytes written. It lets its buffer grow to twice
// max before dropping the front, so each byte is moved at most once on
// average (shifting on every write would copy max bytes per write).
type tail struct {
	buf     []byte
	max     int
	dropped int64
}

func (t *tail) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.dropped += int64(len(t.buf) + len(p) - t.max)
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	t.buf = append(t.buf, p...)
	if extra := len(t.buf) - t.max; extra > t.max {
		t.dropped += int64(extra)
		t.buf = t.buf[:copy(t.buf, t.buf[extra:])]
	}
	return n, nil
}

// Bytes are the last max bytes written.
func (t *tail) Bytes() []byte { return t.buf[len(t.buf)-min(len(t.buf), t.max):] }

// Dropped counts the bytes written before the kept ones.
func (t *tail) Dropped() int64 { return t.dropped + int64(max(len(t.buf)-t.max, 0)) }

// headTail keeps the first head and last tail bytes written: the start of a
// long error output says what failed, its end says how.
type headTail struct {
	head, tail []byte
	headMax    int
	tailMax    int
	dropped    int64
}

func newHeadTail() *headTail { return &headTail{headMax: stderrHead, tailMax: stderrTail} }

func (h *headTail) Write(p []byte) (int, error) {
	n := len(p)
	if room := h.headMax - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	h.tail = append(h.tail, p...)
	if extra := len(h.tail) - h.tailMax; extra > 0 {
		h.dropped += int64(extra)
		// Shift rather than grow: the buffer stays at tailMax.
		h.tail = append(h.tail[:0], h.tail[extra:]...)
	}
	return n, nil
}

func (h *headTail) String() string {
	if h.dropped == 0 {
		return string(h.head) + string(h.tail)
	}
	return fmt.Sprintf("%s\n[... %d bytes left out ...]\n%s", h.head, h.dropped, h.tail)
}
