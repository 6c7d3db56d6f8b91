// Package sdnotifytest stands in for systemd's end of $NOTIFY_SOCKET in
// tests: a real unixgram socket that collects every message sent to it.
package sdnotifytest

import (
	"net"
	"strings"
	"sync"
	"testing"
)

// Socket collects the datagrams sent to Path until the test ends.
type Socket struct {
	Path string
	mu   sync.Mutex
	msgs []string
}

// Listen binds a unixgram socket at path (closed when the test ends). It
// does not set $NOTIFY_SOCKET: a test of a child process passes Path in
// the child's environment, one of this process uses t.Setenv.
func Listen(t testing.TB, path string) *Socket {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := &Socket{Path: path}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, string(buf[:k]))
			s.mu.Unlock()
		}
	}()
	return s
}

// Has says whether any message so far contains sub.
func (s *Socket) Has(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.msgs {
		if strings.Contains(m, sub) {
			return true
		}
	}
	return false
}

// Messages returns the messages so far.
func (s *Socket) Messages() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.msgs...)
}
