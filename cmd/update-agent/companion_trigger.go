package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/update-agent/update-agent/agent/guard"
	"github.com/update-agent/update-agent/agent/systemd"
)

// Companion mode's trigger: rpm-ostree status is too dear to run every
// second on an idle host, and every 5 s opens the window after the pull
// has dirtied much of the update in the page cache. rpm-ostreed's own
// cgroup says at once when it writes: its memory.stat's file_dirty and
// file_writeback (page cache the daemon dirtied, not yet on disk: the
// pull's objects; status and the other queries write none). Reading one
// kept-open cgroup file a few times a second is what the idle agent can
// afford; the status look it triggers is rate-limited.

// triggerBytes is how much dirty page cache rpm-ostreed holds before a
// rise says it writes: the daemon's own small files stay below it.
const triggerBytes = 2 << 20

// triggerSample is one read of rpm-ostreed's cgroup.
type triggerSample struct {
	// Present: the cgroup exists (rpm-ostreed exits when idle and its
	// cgroup goes with it: absent is idle).
	Present bool
	// Pending is file_dirty + file_writeback, bytes.
	Pending uint64
}

// triggerWriting is the trigger's decision: rpm-ostreed started writing
// (a transaction pulls or writes a deployment) between prev and cur: it
// holds at least triggerBytes of dirty page cache, more than before. A
// level alone would fire for the 30 s the kernel keeps an old write
// dirty; a rise alone, for any small write.
func triggerWriting(prev, cur triggerSample) bool {
	if !cur.Present || cur.Pending < triggerBytes {
		return false
	}
	return !prev.Present || cur.Pending > prev.Pending
}

// parseTriggerStat reads file_dirty and file_writeback from memory.stat.
func parseTriggerStat(stat []byte) (uint64, error) {
	var sum uint64
	found := 0
	for line := range bytes.Lines(stat) {
		k, v, ok := bytes.Cut(bytes.TrimSuffix(line, []byte{'\n'}), []byte{' '})
		if !ok || (string(k) != "file_dirty" && string(k) != "file_writeback") {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("memory.stat %s: %w", k, err)
		}
		sum += n
		found++
	}
	if found != 2 {
		return 0, errors.New("memory.stat has no file_dirty and file_writeback lines")
	}
	return sum, nil
}

// triggerRelook is the least time between two asks of systemd where
// rpm-ostreed's cgroup is while the trigger cannot read it (a D-Bus call:
// at the companion's poll, not the trigger's).
const triggerRelook = companionPoll

// triggerAskTimeout bounds one ask: the companion's loop waits on it.
const triggerAskTimeout = 2 * time.Second

// triggerRelocate says whether the trigger asks systemd again where the
// unit's cgroup is: first, then only while it cannot read one (unknown,
// absent: the daemon exited, or restarted elsewhere after a Slice=
// change), once per relook. Reading, it keeps its open file and asks
// nothing.
func triggerRelocate(asked, reading bool, since, relook time.Duration) bool {
	if !asked {
		return true
	}
	return !reading && since >= relook
}

// cgroupTrigger reads the trigger from a unit's cgroup, its memory.stat
// kept open between reads. Where the cgroup is it asks systemd (find:
// the unit's ControlGroup, or where its Slice= puts it while it does not
// run), not a fixed path: a host may move rpm-ostreed.
type cgroupTrigger struct {
	root string // the cgroup2 mount
	unit string
	find unitCgroups
	// relook: 0 is triggerRelook.
	relook time.Duration
	clock  clockwork.Clock
	log    *slog.Logger

	cg      string // relative to root, "" not yet found
	dir     string
	stat    guard.KernelFile
	asked   time.Time
	reading bool // the last read found memory.stat
	warned  bool
}

// unitCgroups says where a unit's cgroup is, relative to the cgroup2
// root, "" when it cannot (*systemdCgroups).
type unitCgroups interface {
	UnitCgroup(ctx context.Context, unit string) (string, error)
}

func newCgroupTrigger(root, unit string, find unitCgroups, log *slog.Logger) *cgroupTrigger {
	return &cgroupTrigger{root: root, unit: unit, find: find, clock: clockwork.NewRealClock(), log: log}
}

// String is the watched memory.stat, or the unit while none is found.
func (c *cgroupTrigger) String() string {
	if c.cg == "" {
		return c.unit + "'s cgroup (not found yet)"
	}
	return c.stat.Path
}

// Sample reads the cgroup now; its absence is a sample, not an error.
func (c *cgroupTrigger) Sample(ctx context.Context) (triggerSample, error) {
	relook := c.relook
	if relook <= 0 {
		relook = triggerRelook
	}
	now := c.clock.Now()
	if triggerRelocate(!c.asked.IsZero(), c.reading, now.Sub(c.asked), relook) {
		c.locate(ctx, now)
	}
	s, err := c.read()
	c.reading = err == nil && s.Present
	return s, err
}

// locate asks systemd where the unit's cgroup is. A failed ask keeps the
// cgroup known before (systemd may answer next time).
func (c *cgroupTrigger) locate(ctx context.Context, now time.Time) {
	c.asked = now
	actx, cancel := context.WithTimeout(ctx, triggerAskTimeout)
	cg, err := c.find.UnitCgroup(actx, c.unit)
	cancel()
	if err != nil || cg == "" {
		if err == nil {
			err = errors.New("systemd has no cgroup for it")
		}
		if !c.warned && ctx.Err() == nil {
			c.log.Warn("companion trigger: cannot find the unit's cgroup; the trigger is off, the poll alone finds transactions",
				"unit", c.unit, "poll_seconds", companionPoll.Seconds(), "err", err)
		}
		c.warned = true
		return
	}
	c.warned = false
	if cg == c.cg {
		return
	}
	c.stat.Close()
	c.cg, c.dir = cg, filepath.Join(c.root, cg)
	c.stat = guard.KernelFile{Path: filepath.Join(c.dir, "memory.stat")}
	c.log.Info("companion trigger watching", "cgroup", c.dir, "unit", c.unit)
}

func (c *cgroupTrigger) read() (triggerSample, error) {
	if c.cg == "" {
		return triggerSample{}, nil
	}
	b, err := c.stat.Read()
	if errors.Is(err, fs.ErrNotExist) {
		if _, derr := os.Stat(c.dir); derr == nil {
			return triggerSample{}, fmt.Errorf("%s: no memory.stat: the memory controller is off there", c.dir)
		}
		return triggerSample{}, nil
	}
	if err != nil {
		return triggerSample{}, fmt.Errorf("reading %s's cgroup: %w", c.unit, err)
	}
	n, err := parseTriggerStat(b)
	if err != nil {
		return triggerSample{}, fmt.Errorf("%s: %w", c.stat.Path, err)
	}
	return triggerSample{Present: true, Pending: n}, nil
}

func (c *cgroupTrigger) Close() {
	c.stat.Close()
	if cl, ok := c.find.(interface{ Close() }); ok {
		cl.Close()
	}
}

// systemdCgroups finds a unit's cgroup on systemd's bus (Conn.UnitCgroup),
// dialled at the first ask and again after a failed one.
type systemdCgroups struct{ conn *systemd.Conn }

func (s *systemdCgroups) UnitCgroup(ctx context.Context, unit string) (string, error) {
	if s.conn == nil {
		conn, err := systemd.Dial(ctx)
		if err != nil {
			return "", err
		}
		s.conn = conn
	}
	cg, err := s.conn.UnitCgroup(ctx, unit)
	if err != nil {
		s.Close()
	}
	return cg, err
}

func (s *systemdCgroups) Close() {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

// triggerCgroup is the cgroup directory the trigger reads (doctor's
// companion line), found as the daemon finds it.
func triggerCgroup(ctx context.Context, root string) (string, error) {
	s := &systemdCgroups{}
	defer s.Close()
	cg, err := s.UnitCgroup(ctx, rpmOstreeDaemon)
	if err != nil {
		return "", err
	}
	if cg == "" {
		return "", errors.New("systemd has no cgroup for it")
	}
	return filepath.Join(rooted(root, "/sys/fs/cgroup"), cg), nil
}
