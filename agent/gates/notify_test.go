package gates

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	msg := Message("cp1", "abc123", 0)
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

// Announce tells at once, users logged in or not: the wait for them is the
// engine's, after the notice, so they are warned during it.
func TestAnnounceDoesNotWait(t *testing.T) {
	bin, out := wallStub(t)
	asked := 0
	n := Notifier{Wall: bin, Users: func(context.Context) (int, error) { asked++; return 2, nil }}
	msg := Message("cp1", "abc123", 10*time.Minute)
	if err := n.Announce(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != msg {
		t.Fatalf("wall got %q %v, want %q", b, err, msg)
	}
	if asked != 0 {
		t.Fatalf("Announce counted sessions %d times: it must not wait for them", asked)
	}
	if !strings.Contains(msg, "waits up to 10m0s for logged-in users") {
		t.Fatalf("message does not tell the delay: %q", msg)
	}
	if c, err := n.LoggedIn(context.Background()); c != 2 || err != nil {
		t.Fatalf("LoggedIn = %d, %v", c, err)
	}
	if c, err := (Notifier{}).LoggedIn(context.Background()); c != 0 || err != nil {
		t.Fatalf("LoggedIn without a counter = %d, %v", c, err)
	}
}
