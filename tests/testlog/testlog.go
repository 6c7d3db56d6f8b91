// Package testlog holds log plumbing shared by tests.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer safe for the concurrent writes of a logger shared
// by goroutines (agents, keepalives), read back with String.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
