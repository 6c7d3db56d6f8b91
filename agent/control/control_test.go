package control

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run", "control.sock")
	// A stale socket from a killed daemon must not stop the next one.
	for i := 0; i < 2; i++ {
		ln, err := Listen("unix:" + sock)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(sock)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
		}
		ctx, cancel := context.WithCancel(context.Background())
		asked := make(chan struct{}, 1)
		srv := &Server{
			Status:    func(context.Context) (any, error) { return map[string]string{"state": "staged"}, nil },
			UpdateNow: func() { asked <- struct{}{} },
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, ln) }()
		c := Client{Socket: sock}
		raw, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]string
		if err := json.Unmarshal(raw, &got); err != nil || got["state"] != "staged" {
			t.Fatalf("status %s, %v", raw, err)
		}
		if err := c.UpdateNow(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-asked:
		default:
			t.Fatal("update-now did not reach the engine")
		}
		if i == 0 {
			// Leave the socket behind, as a killed daemon does.
			ln.(*net.UnixListener).SetUnlinkOnClose(false)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(sock); i == 0 && err != nil {
			t.Fatal("no stale socket left for the second round")
		}
	}
}

func TestNotASocket(t *testing.T) {
	p := filepath.Join(t.TempDir(), "control.sock")
	os.WriteFile(p, []byte("precious"), 0o600)
	if _, err := ListenUnix(p); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("err %v", err)
	}
}

func TestClientWithoutDaemon(t *testing.T) {
	c := Client{Socket: filepath.Join(t.TempDir(), "none.sock")}
	_, err := c.Status(context.Background())
	if err == nil || !strings.Contains(err.Error(), "is update-agent.service running") {
		t.Fatalf("err %v", err)
	}
}
