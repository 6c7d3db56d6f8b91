package guest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sshOpts are the client options shared by ssh and scp. Commands go through
// a ControlMaster when one runs (a fresh handshake costs ~1.5 s against a
// TCG guest) and connect directly otherwise (ControlMaster=no falls back).
func (g *Guest) sshOpts() []string {
	return []string{
		"-i", g.img.key,
		"-o", "BatchMode=yes",
		"-o", "IdentitiesOnly=yes",
		"-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + g.img.knownHosts,
		"-o", "HostKeyAlias=ua-guest",
		"-o", "ConnectTimeout=20",
		"-o", "ServerAliveInterval=5",
		"-o", "ServerAliveCountMax=6",
		"-o", "ControlMaster=no",
		"-o", "ControlPath=" + g.controlPath(),
		"-o", "LogLevel=ERROR",
	}
}

func (g *Guest) controlPath() string { return filepath.Join(g.dir, "ssh.ctl") }

func (g *Guest) sshArgs(cmd string) []string {
	args := append(g.sshOpts(), "-p", strconv.Itoa(g.port), "root@127.0.0.1", "--", cmd)
	return args
}

// Run runs cmd (a shell command line for the guest) as root over ssh.
// code is the command's exit status. err is set when the command could not
// be run at all (ssh failed: exit 255, or ctx ended); the command's own
// failure is only a non-zero code.
func (g *Guest) Run(ctx context.Context, cmd string) (stdout, stderr string, code int, err error) {
	var out, errb bytes.Buffer
	c := exec.CommandContext(ctx, "ssh", g.sshArgs(cmd)...)
	c.Stdout, c.Stderr = &out, &errb // stdin: /dev/null
	c.WaitDelay = 5 * time.Second
	runErr := c.Run()
	stdout, stderr = out.String(), errb.String()
	var ee *exec.ExitError
	switch {
	case runErr == nil:
		return stdout, stderr, 0, nil
	case ctx.Err() != nil:
		return stdout, stderr, -1, fmt.Errorf("running %q in the guest: %w", cmd, context.Cause(ctx))
	case errors.As(runErr, &ee) && ee.ExitCode() == 255:
		return stdout, stderr, 255, fmt.Errorf("ssh to the guest for %q: exit 255: %s", cmd, strings.TrimSpace(stderr))
	case errors.As(runErr, &ee) && ee.ExitCode() >= 0:
		return stdout, stderr, ee.ExitCode(), nil
	default:
		return stdout, stderr, -1, fmt.Errorf("running %q in the guest: %w", cmd, runErr)
	}
}

// MustRun runs cmd and fails the test unless it exits 0; returns stdout.
func (g *Guest) MustRun(t testing.TB, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	stdout, stderr, code, err := g.Run(ctx, cmd)
	if err != nil {
		t.Fatalf("guest: %v", err)
	}
	if code != 0 {
		t.Fatalf("guest: %q exited %d\nstdout:\n%s\nstderr:\n%s", cmd, code, stdout, stderr)
	}
	return stdout
}

// CopyIn copies a local file or directory to remote in the guest (scp -rp:
// modes are kept).
func (g *Guest) CopyIn(ctx context.Context, local, remote string) error {
	args := append(g.sshOpts(), "-P", strconv.Itoa(g.port), "-r", "-p", "-q", local, "root@127.0.0.1:"+remote)
	out, err := exec.CommandContext(ctx, "scp", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copying %s to the guest's %s: %w: %s", local, remote, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// bootID is the guest kernel's boot id, or an error if ssh does not answer.
func (g *Guest) bootID(ctx context.Context) (string, error) {
	// Bounded: while the guest is down, slirp still accepts the TCP
	// connection and ssh would wait for a banner that never comes.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, stderr, code, err := g.Run(ctx, "cat /proc/sys/kernel/random/boot_id")
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(stderr))
	}
	return strings.TrimSpace(out), err
}

// waitUp polls ssh until the guest answers with a boot id other than
// oldBootID. It gives up early if qemu exits or the kernel panics.
func (g *Guest) waitUp(ctx context.Context, oldBootID string, consoleFrom int64) error {
	start, nextNote := time.Now(), time.Now().Add(time.Minute)
	var last error
	for {
		id, err := g.bootID(ctx)
		if err == nil && id != "" && id != oldBootID {
			return nil
		}
		if err != nil {
			last = err
		} else {
			last = errors.New("still the old boot")
		}
		if g.exited() {
			return fmt.Errorf("qemu exited (%v): %s", g.qemuExit(), g.qemuStderr())
		}
		if bytes.Contains(g.consoleSince(consoleFrom), []byte("Kernel panic")) {
			return errors.New("the guest kernel panicked")
		}
		if time.Now().After(nextNote) {
			fmt.Fprintf(g.opts.Log, "guest: still waiting for ssh after %s (%v)\n", time.Since(start).Round(time.Second), last)
			nextNote = time.Now().Add(time.Minute)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting %s for ssh on 127.0.0.1:%d: %w (last try: %v)",
				time.Since(start).Round(time.Second), g.port, ctx.Err(), last)
		case <-time.After(time.Second):
		}
	}
}

// settle waits for systemd to finish starting up and requires "running": a
// degraded guest would make every later assertion suspect.
func (g *Guest) settle(ctx context.Context) error {
	out, _, _, err := g.Run(ctx, "systemctl is-system-running --wait")
	if err != nil {
		return err
	}
	if state := strings.TrimSpace(out); state != "running" {
		failed, _, _, _ := g.Run(ctx, "systemctl --failed --no-legend --no-pager; journalctl -p err -b --no-pager | tail -40")
		return fmt.Errorf("guest system state %q, want running:\n%s", state, failed)
	}
	g.startMaster()
	return nil
}

// Reboot reboots the guest and waits until ssh answers from the new boot
// and systemd has settled. qemu keeps running, except for an ostree guest
// (Options.Ostree), which boots its default boot entry in a new qemu.
func (g *Guest) Reboot(ctx context.Context) error {
	// Detached, so ssh returns at once instead of hanging on a connection
	// that dies with the guest.
	// AccuracySec: a timer's default accuracy (1 min) let "1 s" fire up to
	// a minute late.
	return g.RebootWith(ctx, "systemd-run --no-block --on-active=1 --timer-property=AccuracySec=100ms systemctl reboot")
}

// RebootWith runs cmd, which must reboot the guest (e.g. `rpm-ostree
// finalize-deployment`), and waits for the new boot as Reboot does. ssh
// losing its connection while the guest goes down is not a failure; cmd
// exiting non-zero is.
func (g *Guest) RebootWith(ctx context.Context, cmd string) error {
	ctx, cancel := context.WithTimeout(ctx, g.opts.BootTimeout)
	defer cancel()
	old, err := g.bootID(ctx)
	if err != nil {
		return fmt.Errorf("rebooting the guest: %w", err)
	}
	g.stopMaster()
	consoleFrom := g.consoleSize()
	out, stderr, code, err := g.Run(ctx, "date +%s.%N; "+cmd)
	if (err != nil && code != 255) || (code != 0 && code != 255) {
		return fmt.Errorf("rebooting the guest: %q: exit %d: %v %s", cmd, code, err, stderr)
	}
	requested, _ := strconv.ParseFloat(strings.Fields(out + " 0")[0], 64)
	start := time.Now()
	if err := g.waitUp(ctx, old, consoleFrom); err != nil {
		return fmt.Errorf("rebooting the guest: %w\n%s", err, g.rebootReport(consoleFrom))
	}
	if err := g.settle(ctx); err != nil {
		return fmt.Errorf("rebooting the guest: %w\n%s", err, g.rebootReport(consoleFrom))
	}
	fmt.Fprintf(g.opts.Log, "guest: rebooted in %s (%s)\n", time.Since(start).Round(100*time.Millisecond), g.rebootPhases(ctx, requested))
	return nil
}

// rebootPhases splits a reboot, in guest clock seconds, into shutdown (the
// request to the last journal entry of the old boot) and boot (kernel start
// to now), so a slow reboot says where its time went.
func (g *Guest) rebootPhases(ctx context.Context, requested float64) string {
	out, _, code, err := g.Run(ctx, "journalctl -b -1 -n 1 -o json --output-fields=MESSAGE | jq -r .__REALTIME_TIMESTAMP; "+
		"date +%s.%N; cut -d' ' -f1 /proc/uptime")
	f := strings.Fields(out)
	if err != nil || code != 0 || len(f) != 3 || requested == 0 {
		return "phases unknown"
	}
	lastOld, _ := strconv.ParseFloat(f[0], 64)
	now, _ := strconv.ParseFloat(f[1], 64)
	up, _ := strconv.ParseFloat(f[2], 64)
	lastOld /= 1e6
	return fmt.Sprintf("shutdown %.1fs, reset %.1fs, boot to settled %.1fs",
		lastOld-requested, now-up-lastOld, up)
}

// Journal returns journal entries (journalctl -o json) of unit, or of the
// whole journal if unit is "", from all boots kept (the journal persists).
func (g *Guest) Journal(ctx context.Context, unit string) ([]map[string]any, error) {
	cmd := "journalctl -o json --no-pager"
	if unit != "" {
		cmd += " -u " + ShellQuote(unit)
	}
	out, stderr, code, err := g.Run(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("%s: exit %d: %s", cmd, code, strings.TrimSpace(stderr))
	}
	return ParseJournal([]byte(out))
}

// ParseJournal reads journalctl -o json: one object a line.
func ParseJournal(b []byte) ([]map[string]any, error) {
	var entries []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e map[string]any
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("journal line %d: %w", n, err)
		}
		entries = append(entries, e)
	}
	return entries, sc.Err()
}

// ShellQuote quotes s as one word for the guest's shell.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// startMaster starts an ssh ControlMaster as our own child (not a
// ControlPersist daemon, whose inherited pipes would hang exec's Wait).
// Only an optimisation: Run connects directly when it is missing.
func (g *Guest) startMaster() {
	g.sshMu.Lock()
	defer g.sshMu.Unlock()
	if g.master != nil {
		select {
		case <-g.master.done:
		default:
			return // still running
		}
	}
	_ = os.Remove(g.controlPath())
	args := g.sshOpts()
	for i, a := range args {
		if a == "ControlMaster=no" {
			args[i] = "ControlMaster=yes"
		}
	}
	args = append(args, "-N", "-p", strconv.Itoa(g.port), "root@127.0.0.1")
	p, err := startProcess(exec.Command("ssh", args...))
	if err != nil {
		g.master = nil
		return
	}
	g.master = p
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(g.controlPath()); err == nil {
			return
		}
		select {
		case <-p.done:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (g *Guest) stopMaster() {
	g.sshMu.Lock()
	defer g.sshMu.Unlock()
	if g.master == nil {
		return
	}
	_ = g.master.cmd.Process.Kill()
	<-g.master.done
	g.master = nil
	_ = os.Remove(g.controlPath())
}
