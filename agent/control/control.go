// Package control is the daemon's control socket: a root-only unix socket
// under /run/update-agent/ serving HTTP, so that `update-agent status` and
// `update-agent update-now` talk to the running daemon.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultSocket is the control socket's path on a host.
const DefaultSocket = "/run/update-agent/control.sock"

// Listen opens "unix:/path" as a socket only root can use (0600; a stale
// socket left by a killed daemon is replaced) or "host:port" over TCP.
func Listen(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listening on %s: %w", addr, err)
		}
		return ln, nil
	}
	return ListenUnix(path)
}

// ListenUnix opens a root-only unix socket at path.
func ListenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("listening on %s: exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listening on %s: removing stale socket: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	// The directory is 0700 too (RuntimeDirectoryMode); this closes the
	// socket itself to anyone but root.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	return ln, nil
}

// Server answers the subcommands.
type Server struct {
	// Status returns what `update-agent status` shows, as JSON.
	Status func(ctx context.Context) (any, error)
	// UpdateNow asks the engine to check and stage now.
	UpdateNow func()
	Log       *slog.Logger
}

// Serve serves on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		v, err := s.Status(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(v)
	})
	mux.HandleFunc("POST /v1/update-now", func(w http.ResponseWriter, r *http.Request) {
		if s.Log != nil {
			s.Log.Info("update-now requested over the control socket")
		}
		s.UpdateNow()
		w.WriteHeader(http.StatusAccepted)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// MaxAnswer bounds what the client reads of an answer (1 MiB). A status is
// a few KiB; whatever answers on the socket, the client never holds more.
const MaxAnswer = 1 << 20

// Client talks to a daemon's control socket.
type Client struct {
	Socket string
}

func (c Client) http() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", c.Socket)
		},
	}}
}

func (c Client) do(ctx context.Context, method, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://update-agent"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, fmt.Errorf("talking to the daemon at %s (is update-agent.service running?): %w", c.Socket, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("reading the daemon's answer: %w", err)
	}
	if len(b) > MaxAnswer {
		return nil, fmt.Errorf("reading the daemon's answer: longer than %d bytes (control.MaxAnswer); not the daemon's status", MaxAnswer)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("daemon answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// Status fetches the daemon's status as raw JSON.
func (c Client) Status(ctx context.Context) (json.RawMessage, error) {
	return c.do(ctx, http.MethodGet, "/v1/status")
}

// UpdateNow asks the daemon to check and stage now.
func (c Client) UpdateNow(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/update-now")
	return err
}
