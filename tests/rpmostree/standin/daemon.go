package standin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/sdnotify"
)

// Daemon is the stand-in rpm-ostreed: it owns the sysroot and runs one
// transaction at a time.
type Daemon struct {
	cfg    Config
	log    *slog.Logger
	ostree ostreeCLI
	runner oplog.Runner
	store  store

	handlers sync.WaitGroup

	mu        sync.Mutex
	txn       *txn
	rebooting bool
}

type txn struct {
	method, sender, title string
	cancel                context.CancelFunc
	done                  chan struct{}
}

// NewDaemon opens the deployments: the booted ostree sysroot in real mode,
// else the stand-in's records.
func NewDaemon(cfg Config, log *slog.Logger) (*Daemon, error) {
	r := oplog.Runner{Log: log}
	d := &Daemon{cfg: cfg, log: log, ostree: newOstree(cfg, r), runner: r}
	if cfg.RealSysroot {
		d.store = newSysrootStore(d.ostree)
		return d, nil
	}
	fs, err := newFileStore(cfg, d.ostree, log)
	if err != nil {
		return nil, err
	}
	d.store = fs
	return d, nil
}

// Serve accepts clients on the socket until ctx ends.
func (d *Daemon) Serve(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(d.cfg.Socket), 0o755); err != nil {
		return err
	}
	_ = os.Remove(d.cfg.Socket)
	ln, err := net.Listen("unix", d.cfg.Socket)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); ln.Close() }()
	_ = sdnotify.Notifier{}.Ready("idle") // Type=notify in rpm-ostreed.service
	d.log.Info("rpm-ostreed stand-in ready", "socket", d.cfg.Socket, "sysroot", d.cfg.Sysroot, "run_dir", d.cfg.RunDir)
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				d.mu.Lock()
				t := d.txn
				d.mu.Unlock()
				if t != nil {
					t.cancel()
				}
				// Let handlers finish, the reboot command included, so
				// nothing writes after the daemon is gone.
				d.handlers.Wait()
				return nil
			}
			return err
		}
		d.handlers.Add(1)
		go func() { defer d.handlers.Done(); d.handle(conn) }()
	}
}

func (d *Daemon) handle(conn net.Conn) {
	defer conn.Close()
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	if !sc.Scan() {
		return
	}
	var req Request
	if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
		return
	}
	enc := json.NewEncoder(conn)
	var mu sync.Mutex
	send := func(ev Event) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(ev) // a vanished client does not stop the transaction
	}
	emit := func(format string, a ...any) { send(Event{Msg: fmt.Sprintf(format, a...)}) }

	switch req.Verb {
	case "status":
		b, err := d.status()
		send(done(Event{Status: b}, err))
		return
	case "cancel":
		d.cancelActive(emit)
		send(Event{Done: true})
		return
	}
	run, method, ok := d.transactionFor(req)
	if !ok {
		send(Event{Done: true, Error: fmt.Sprintf("Unknown method %q", req.Verb)})
		return
	}
	t, ctx, err := d.begin(method, req)
	if err != nil {
		send(Event{Done: true, Error: err.Error()})
		return
	}
	cancel := t.cancel
	go func() {
		for sc.Scan() {
			var r Request
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Cancel {
				d.log.Info("client asked to cancel the transaction", "title", t.title)
				cancel()
			}
		}
	}()
	// Worded as rpm-ostreed's journal line, which names the client.
	d.log.Info(fmt.Sprintf("Initiated txn %s for client(id:%s dbus:%s unit:%s)", method, req.ClientID, req.Sender, req.CallerUnit),
		"title", t.title)
	ev, err := run(ctx, req, emit)
	if err != nil && ctx.Err() != nil {
		err = errors.New("Operation was cancelled")
	}
	d.end(t)
	cancel()
	if err != nil {
		d.log.Warn("transaction failed", "title", t.title, "error", err)
	} else {
		d.log.Info("transaction complete", "title", t.title)
	}
	send(done(ev, err))
	d.afterTransaction()
}

func done(ev Event, err error) Event {
	ev.Done = true
	if err != nil {
		ev.Error = err.Error()
	}
	return ev
}

type txnFunc func(ctx context.Context, req Request, emit func(string, ...any)) (Event, error)

func (d *Daemon) transactionFor(req Request) (txnFunc, string, bool) {
	switch req.Verb {
	case "check":
		return d.check, "AutomaticUpdateTrigger", true
	case "upgrade":
		return d.stage, "Upgrade", true
	case "deploy":
		return d.deploy, "Deploy", true
	case "rebase":
		return d.stage, "Rebase", true
	case "finalize":
		return d.finalize, "FinalizeDeployment", true
	case "cleanup":
		return d.cleanup, "Cleanup", true
	}
	return nil, "", false
}

func (d *Daemon) begin(method string, req Request) (*txn, context.Context, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.rebooting {
		return nil, nil, errors.New("Reboot initiated, cannot start new transaction")
	}
	if d.txn != nil {
		return nil, nil, fmt.Errorf("Transaction in progress: %s\n You can cancel the current transaction with `rpm-ostree cancel`", d.txn.title)
	}
	title := req.Cmdline
	if title == "" {
		title = req.Verb
	}
	// The transaction's context is not the client's: it outlives the client.
	ctx, cancel := context.WithCancel(context.Background())
	d.txn = &txn{method: method, sender: req.Sender, title: title, cancel: cancel, done: make(chan struct{})}
	return d.txn, ctx, nil
}

func (d *Daemon) end(t *txn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.txn = nil
	close(t.done)
}

// cancelActive is `rpm-ostree cancel`: cancel and wait until the
// transaction is gone.
func (d *Daemon) cancelActive(emit func(string, ...any)) {
	d.mu.Lock()
	t := d.txn
	d.mu.Unlock()
	if t == nil {
		emit("No active transaction.")
		return
	}
	emit("Cancelling transaction: %s", t.title)
	t.cancel()
	<-t.done
	emit("Cancelled.")
}

// afterTransaction runs the reboot a finalize-deployment asked for, after
// the client got its reply (rpm-ostreed reboots once the transaction ends).
func (d *Daemon) afterTransaction() {
	d.mu.Lock()
	reboot := d.rebooting
	d.mu.Unlock()
	if !reboot || len(d.cfg.RebootCmd) == 0 {
		return
	}
	if _, err := d.runner.Run(context.Background(), "rebooting", d.cfg.RebootCmd...); err != nil {
		d.log.Error("reboot command failed", "error", err)
	}
}

func (d *Daemon) activeTxn() *txn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.txn
}
