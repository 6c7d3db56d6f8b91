package sdnotify

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen binds a real unixgram socket and points $NOTIFY_SOCKET at it.
func listen(t *testing.T) *net.UnixConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("reading notify socket: %v", err)
	}
	return string(buf[:n])
}

func TestReadyStatusStopping(t *testing.T) {
	c := listen(t)
	var n Notifier
	if err := n.Ready("idle: up to date"); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, c); got != "READY=1\nSTATUS=idle: up to date" {
		t.Errorf("got %q", got)
	}
	n.Status("waiting for reboot slot")
	if got := recv(t, c); got != "STATUS=waiting for reboot slot" {
		t.Errorf("got %q", got)
	}
	n.Stopping()
	if got := recv(t, c); got != "STOPPING=1" {
		t.Errorf("got %q", got)
	}
}

func TestWatchdog(t *testing.T) {
	c := listen(t)
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", "")
	iv := WatchdogInterval()
	if iv != 100*time.Millisecond {
		t.Fatalf("interval = %v, want 100ms (half of WatchdogSec)", iv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	healthy := make(chan bool, 1)
	healthy <- true
	alive := func() bool {
		select {
		case v := <-healthy:
			return v
		default:
			return false
		}
	}
	go Notifier{}.PingWhile(ctx, iv, alive)
	if got := recv(t, c); got != "WATCHDOG=1" {
		t.Errorf("got %q", got)
	}
	// A stuck loop (alive false) sends no pings.
	c.SetReadDeadline(time.Now().Add(400 * time.Millisecond))
	buf := make([]byte, 64)
	if n, err := c.Read(buf); err == nil {
		t.Errorf("pinged while not alive: %q", buf[:n])
	} else if !strings.Contains(err.Error(), "timeout") {
		t.Fatal(err)
	}
}

func TestNoSocketIsNoop(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "")
	if err := (Notifier{}).Ready("x"); err != nil {
		t.Fatal(err)
	}
	if WatchdogInterval() != 0 {
		t.Fatal("watchdog enabled without WATCHDOG_USEC")
	}
}
