package standin

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
)

// The CLI talks to the daemon over a unix socket with JSON lines: one Request,
// then Events from the daemon until one has Done set. While waiting, the
// client may send {"cancel":true} (what rpm-ostree's client does on SIGINT).
// A client that just disconnects does not cancel: like rpm-ostreed's, the
// transaction outlives its client.

// Request is one CLI call.
type Request struct {
	Verb             string `json:"verb"` // status check upgrade deploy rebase finalize cleanup cancel
	Cmdline          string `json:"cmdline,omitempty"`
	Sender           string `json:"sender,omitempty"`
	ClientID         string `json:"client_id,omitempty"` // $RPMOSTREE_CLIENT_ID
	CallerUnit       string `json:"caller_unit,omitempty"`
	Refspec          string `json:"refspec,omitempty"`
	Revision         string `json:"revision,omitempty"`
	HasRevision      bool   `json:"has_revision,omitempty"`
	LockFinalization bool   `json:"lock_finalization,omitempty"`
	AllowDowngrade   bool   `json:"allow_downgrade,omitempty"`
	// DisallowDowngrade: deploy and rebase allow an older tree unless
	// told not to; upgrade refuses one unless AllowDowngrade.
	DisallowDowngrade bool   `json:"disallow_downgrade,omitempty"`
	RegisterDriver    string `json:"register_driver,omitempty"`
	Checksum          string `json:"checksum,omitempty"`
	AllowMissing      bool   `json:"allow_missing,omitempty"`
	AllowUnlocked     bool   `json:"allow_unlocked,omitempty"`
	CleanupPending    bool   `json:"cleanup_pending,omitempty"`
	CleanupRollback   bool   `json:"cleanup_rollback,omitempty"`
	Cancel            bool   `json:"cancel,omitempty"`
}

// Event is a message or the final reply.
type Event struct {
	Msg     string          `json:"msg,omitempty"`
	Done    bool            `json:"done,omitempty"`
	Error   string          `json:"error,omitempty"`
	Changed bool            `json:"changed,omitempty"`
	Status  json.RawMessage `json:"status,omitempty"`
	Update  *UpdateInfo     `json:"update,omitempty"`
}

// UpdateInfo is check's "AvailableUpdate".
type UpdateInfo struct {
	Checksum  string `json:"checksum"`
	Version   string `json:"version"`
	Timestamp uint64 `json:"timestamp"`
	// Layers is set for a container origin: its update is a layer diff.
	Layers *ManifestDiff `json:"layers,omitempty"`
	// SameBase: no new base commit, only layered packages (Diff).
	SameBase bool   `json:"same_base,omitempty"`
	Diff     string `json:"diff,omitempty"`
}

// ErrNoDaemon is returned when the socket cannot be reached.
var ErrNoDaemon = errors.New("cannot connect to the rpm-ostree daemon")

// Call sends req and returns the final event, passing messages to onMsg.
// When cancel fires the daemon is asked to cancel the transaction.
func Call(socket string, req Request, onMsg func(string), cancel <-chan struct{}) (Event, error) {
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return Event{}, fmt.Errorf("%w at %s: %v", ErrNoDaemon, socket, err)
	}
	defer conn.Close()
	enc := json.NewEncoder(conn)
	if err := enc.Encode(req); err != nil {
		return Event{}, err
	}
	if cancel != nil {
		go func() {
			<-cancel
			_ = enc.Encode(Request{Cancel: true})
		}()
	}
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return Event{}, fmt.Errorf("bad reply from daemon: %w", err)
		}
		if ev.Done {
			return ev, nil
		}
		if onMsg != nil && ev.Msg != "" {
			onMsg(ev.Msg)
		}
	}
	if err := sc.Err(); err != nil {
		return Event{}, err
	}
	return Event{}, errors.New("the rpm-ostree daemon closed the connection")
}
