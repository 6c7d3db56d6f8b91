package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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

// TestAnswerBounded: whatever answers on the socket, the client reads at
// most MaxAnswer bytes and says so; an answer of MaxAnswer bytes is read.
func TestAnswerBounded(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var size atomic.Int64
	size.Store(MaxAnswer)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`"`))
		w.Write(bytes.Repeat([]byte("x"), int(size.Load())-2))
		w.Write([]byte(`"`))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	c := Client{Socket: sock}
	if raw, err := c.Status(context.Background()); err != nil || len(raw) != MaxAnswer {
		t.Fatalf("answer of MaxAnswer bytes: %d bytes, %v", len(raw), err)
	}
	size.Store(MaxAnswer + 1)
	_, err = c.Status(context.Background())
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("longer than %d bytes (control.MaxAnswer)", MaxAnswer)) {
		t.Fatalf("answer over MaxAnswer: err %v", err)
	}
}
