package gates

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// wallStub is a "wall" that records its stdin, so the test sees what users
// would read.
func wallStub(t *testing.T) (bin, out string) {
	dir := t.TempDir()
	out = filepath.Join(dir, "wall.out")
	bin = filepath.Join(dir, "wall")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\ncat > "+out+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, out
}

func TestAnnounceWritesMOTDAndWall(t *testing.T) {
	bin, out := wallStub(t)
	motd := filepath.Join(t.TempDir(), "motd.d", "90-update-agent")
	n := Notifier{MOTDFile: motd, Wall: bin}
	msg := Message("cp1", "abc123")
	if err := n.Announce(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{motd, out} {
		b, err := os.ReadFile(f)
		if err != nil || string(b) != msg {
			t.Fatalf("%s: %q %v, want %q", f, b, err, msg)
		}
	}
	if !strings.Contains(msg, "cp1 reboots shortly to apply update abc123") {
		t.Fatalf("message %q", msg)
	}
	if err := n.Clear(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(motd); !os.IsNotExist(err) {
		t.Fatalf("motd line left after Clear: %v", err)
	}
	if err := n.Clear(); err != nil {
		t.Fatalf("Clear twice: %v", err)
	}
}

// With users logged in the wall waits until they log out, or until
// logged_in_delay has passed, whichever is first.
func TestAnnounceWaitsForLoggedInUsers(t *testing.T) {
	for _, tc := range []struct {
		name        string
		logoutAfter int // polls before the users log out; -1 never
		wantWaited  time.Duration
	}{
		{"nobody logged in", 0, 0},
		{"users log out", 3, 30 * time.Second},
		{"users stay", -1, 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, out := wallStub(t)
			clock := clockwork.NewFakeClock()
			start := clock.Now()
			var polls atomic.Int32
			n := Notifier{Wall: bin, Clock: clock, Poll: 10 * time.Second, LoggedInDelay: 5 * time.Minute,
				Users: func(context.Context) (int, error) {
					p := int(polls.Add(1)) - 1
					if tc.logoutAfter >= 0 && p >= tc.logoutAfter {
						return 0, nil
					}
					return 2, nil
				}}
			done := make(chan error, 1)
			finished, stop := context.WithCancel(context.Background())
			go func() { done <- n.Announce(context.Background(), "msg\n"); stop() }()
			// Advance only while Announce sleeps on the clock, so the fake
			// time it waited is exact.
			for clock.BlockUntilContext(finished, 1) == nil {
				clock.Advance(10 * time.Second)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if waited := clock.Since(start); waited != tc.wantWaited {
				t.Fatalf("waited %s, want %s", waited, tc.wantWaited)
			}
			if _, err := os.Stat(out); err != nil {
				t.Fatalf("no wall message: %v", err)
			}
		})
	}
}
