package iosched

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/update-agent/update-agent/agent/atomicfile"
	"github.com/update-agent/update-agent/agent/oplog"
	"github.com/update-agent/update-agent/agent/state"
)

// Runner runs external commands as logged operations (oplog.Runner).
type Runner interface {
	Run(ctx context.Context, desc string, argv ...string) (oplog.Result, error)
}

// Options says what to change during the staging window.
type Options struct {
	// SysRoot is where sysfs is mounted ("/sys").
	SysRoot string
	// Scheduler to select ("bfq"); "" leaves the scheduler alone.
	Scheduler string
	// NrRequests sets queue/nr_requests (a shallower queue); 0 leaves it.
	NrRequests int
	// MaxSectorsKB sets queue/max_sectors_kb (smaller requests); 0 leaves it.
	MaxSectorsKB int
	// Keep leaves the changes in place after staging. bfq for the staging
	// window only is the default: OpenShift ran bfq permanently on
	// control-plane disks and had to back it out after a kernel lockup.
	Keep bool
	// StateFile records the original values before anything is changed.
	StateFile string
	// ModprobeArgv loads a scheduler module: argv + scheduler name.
	ModprobeArgv []string
	Runner       Runner
	Log          *slog.Logger
	// BootIDPath is where the current boot's ID is read (tests); ""
	// is the kernel's. The record is of kernel state: a reboot resets it.
	BootIDPath string
	// Disks returns the disks the window changes (those behind the
	// staging paths); only a record that does not parse needs them
	// (recoverCorrupt). nil: none known.
	Disks func() ([]string, error)
}

// Change is one disk's original settings ("" / 0: not changed).
type Change struct {
	Disk         string `json:"disk"`
	Scheduler    string `json:"scheduler,omitempty"`
	NrRequests   int    `json:"nr_requests,omitempty"`
	MaxSectorsKB int    `json:"max_sectors_kb,omitempty"`
}

// State is what the state file holds.
type State struct {
	// BootID is the boot the originals were read in; "" in records
	// written before it was kept (taken as the current boot's).
	BootID  string   `json:"boot_id,omitempty"`
	Changes []Change `json:"changes"`
}

func (o Options) sys() string {
	if o.SysRoot == "" {
		return "/sys"
	}
	return o.SysRoot
}

func (o Options) log() *slog.Logger {
	if o.Log != nil {
		return o.Log
	}
	return slog.Default()
}

func (o Options) queueFile(disk, name string) string {
	return filepath.Join(o.sys(), "block", disk, "queue", name)
}

// ParseScheduler parses queue/scheduler ("mq-deadline kyber [bfq] none")
// into the selected scheduler and those offered.
func ParseScheduler(s string) (current string, offered []string) {
	for _, f := range strings.Fields(s) {
		if strings.HasPrefix(f, "[") && strings.HasSuffix(f, "]") {
			f = strings.Trim(f, "[]")
			current = f
		}
		offered = append(offered, f)
	}
	if current == "" && len(offered) == 1 {
		current = offered[0]
	}
	return current, offered
}

func (o Options) readScheduler(disk string) (string, []string, error) {
	b, err := os.ReadFile(o.queueFile(disk, "scheduler"))
	if err != nil {
		return "", nil, fmt.Errorf("reading scheduler of %s: %w", disk, err)
	}
	cur, offered := ParseScheduler(string(b))
	return cur, offered, nil
}

func (o Options) readInt(disk, name string) (int, error) {
	b, err := os.ReadFile(o.queueFile(disk, name))
	if err != nil {
		return 0, fmt.Errorf("reading %s of %s: %w", name, disk, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("reading %s of %s: %w", name, disk, err)
	}
	return v, nil
}

func (o Options) write(disk, name, value string) error {
	p := o.queueFile(disk, name)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err == nil {
		_, err = f.WriteString(value)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("setting %s of %s to %s: %w", name, disk, value, err)
	}
	o.log().Info("disk queue setting changed", "disk", disk, "setting", name, "value", value)
	return nil
}

// Apply changes the settings of disks, recording the originals in the state
// file first so a crash in between still leaves a way back. Originals already
// recorded (an earlier run that crashed) are kept: they are the true ones.
func Apply(ctx context.Context, o Options, disks []string) error {
	if o.Scheduler == "" && o.NrRequests == 0 && o.MaxSectorsKB == 0 {
		return nil
	}
	st, err := o.loadCurrent()
	if err != nil {
		return err
	}
	recorded := map[string]bool{}
	for _, c := range st.Changes {
		recorded[c.Disk] = true
	}
	for _, d := range disks {
		if recorded[d] {
			continue
		}
		c := Change{Disk: d}
		if o.Scheduler != "" {
			if c.Scheduler, _, err = o.readScheduler(d); err != nil {
				return err
			}
		}
		if o.NrRequests > 0 {
			if c.NrRequests, err = o.readInt(d, "nr_requests"); err != nil {
				return err
			}
		}
		if o.MaxSectorsKB > 0 {
			if c.MaxSectorsKB, err = o.readInt(d, "max_sectors_kb"); err != nil {
				return err
			}
		}
		st.Changes = append(st.Changes, c)
	}
	if !o.Keep {
		if err := save(o.StateFile, st); err != nil {
			return err
		}
	}
	for _, d := range disks {
		if err := o.apply(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

func (o Options) apply(ctx context.Context, disk string) error {
	if o.Scheduler != "" {
		cur, offered, err := o.readScheduler(disk)
		if err != nil {
			return err
		}
		if cur != o.Scheduler {
			if !contains(offered, o.Scheduler) {
				if err := o.load(ctx, disk, offered); err != nil {
					return err
				}
			}
			if err := o.write(disk, "scheduler", o.Scheduler); err != nil {
				return err
			}
		}
	}
	// After the scheduler: switching schedulers resets nr_requests.
	if o.NrRequests > 0 {
		if err := o.write(disk, "nr_requests", strconv.Itoa(o.NrRequests)); err != nil {
			return err
		}
	}
	if o.MaxSectorsKB > 0 {
		if err := o.write(disk, "max_sectors_kb", strconv.Itoa(o.MaxSectorsKB)); err != nil {
			return err
		}
	}
	return nil
}

// load loads the scheduler's module (bfq is a module on most kernels).
func (o Options) load(ctx context.Context, disk string, offered []string) error {
	if len(o.ModprobeArgv) == 0 || o.Runner == nil {
		return fmt.Errorf("scheduler %s not offered by %s (offered: %s) and no modprobe configured", o.Scheduler, disk, strings.Join(offered, " "))
	}
	argv := append(append([]string(nil), o.ModprobeArgv...), o.Scheduler)
	if _, err := o.Runner.Run(ctx, "loading I/O scheduler "+o.Scheduler, argv...); err != nil {
		return fmt.Errorf("loading scheduler %s for %s: %w", o.Scheduler, disk, err)
	}
	_, offered, err := o.readScheduler(disk)
	if err != nil {
		return err
	}
	if !contains(offered, o.Scheduler) {
		return fmt.Errorf("scheduler %s still not offered by %s after loading it (offered: %s)", o.Scheduler, disk, strings.Join(offered, " "))
	}
	return nil
}

// Restore puts back what the state file records and removes it. No state
// file means nothing to restore. It restores every disk it can and reports
// all failures; the state file stays when any failed, for the next try.
//
// A record of an earlier boot is dropped, not restored: the kernel started
// over with its own defaults, which an old boot's values must not replace.
// A disk that is gone (unplugged, or renamed) is skipped with a warning: it
// has nothing to restore, and failing on it would fail every retry forever.
func Restore(o Options) error {
	st, err := o.loadCurrent()
	if err != nil || len(st.Changes) == 0 {
		if err == nil {
			err = removeState(o.StateFile)
		}
		return err
	}
	var errs []error
	for _, c := range st.Changes {
		if _, err := os.Stat(filepath.Join(o.sys(), "block", c.Disk)); errors.Is(err, fs.ErrNotExist) {
			o.log().Warn("not restoring the queue settings of a disk that is gone", "disk", c.Disk,
				"scheduler", c.Scheduler, "nr_requests", c.NrRequests, "max_sectors_kb", c.MaxSectorsKB)
			continue
		}
		if c.Scheduler != "" {
			if cur, _, err := o.readScheduler(c.Disk); err != nil {
				errs = append(errs, err)
			} else if cur != c.Scheduler {
				errs = append(errs, o.write(c.Disk, "scheduler", c.Scheduler))
			}
		}
		if c.NrRequests > 0 {
			errs = append(errs, o.write(c.Disk, "nr_requests", strconv.Itoa(c.NrRequests)))
		}
		if c.MaxSectorsKB > 0 {
			errs = append(errs, o.write(c.Disk, "max_sectors_kb", strconv.Itoa(c.MaxSectorsKB)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("restoring disk queue settings: %w", err)
	}
	return removeState(o.StateFile)
}

// loadCurrent loads the state file, dropping (with a warning) a record
// made in another boot, and stamps it with the current boot.
func (o Options) loadCurrent() (State, error) {
	st, err := load(o.StateFile)
	if errors.Is(err, atomicfile.ErrCorrupt) {
		o.recoverCorrupt(err)
		st, err = State{}, nil
	}
	if err != nil {
		return st, err
	}
	p := o.BootIDPath
	if p == "" {
		p = state.BootIDPath
	}
	boot, err := state.ReadBootID(p)
	if err != nil {
		// Unknown boot: the record is kept and restored, as before boot
		// IDs were recorded; a wrong restore is a scheduler, not a hang.
		o.log().Warn("scheduler state kept without a boot ID to check it against", "err", err)
		return st, nil
	}
	if st.BootID != "" && st.BootID != boot && len(st.Changes) > 0 {
		o.log().Warn("dropping the disk queue settings recorded in an earlier boot; the kernel reset them",
			"state_file", o.StateFile, "recorded_boot_id", st.BootID, "changes", len(st.Changes))
		st.Changes = nil
	}
	st.BootID = boot
	return st, nil
}

// recoverCorrupt: a record that does not parse would fail every restore
// and every staging until an operator deleted it. It is set aside (doctor
// fails while it is there). The originals it held are lost; what is known
// is that the window selects o.Scheduler, which is the window's only (bfq
// is not left on a disk for good: it had a kernel lockup on control-plane
// disks). So the disks behind the staging paths that still run it get the
// kernel's own default back (what a reboot would give, udev rules aside),
// which resets nr_requests too; max_sectors_kb stays as it is. One journal
// line says all of it; failures are in it and fail nothing (the record is
// gone, retrying could not do better).
func (o Options) recoverCorrupt(readErr error) {
	to, err := atomicfile.SetAside(o.StateFile, atomicfile.Corrupt, time.Now())
	if err != nil {
		o.log().Error("disk queue record unreadable and cannot be set aside", "state_file", o.StateFile, "err", errors.Join(readErr, err))
		return
	}
	var reset []string
	var errs []error
	if o.Scheduler != "" && o.Disks != nil {
		disks, err := o.Disks()
		errs = append(errs, err)
		for _, d := range disks {
			cur, offered, err := o.readScheduler(d)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			def := o.kernelDefault(d, offered)
			if cur != o.Scheduler || def == "" || def == cur {
				continue
			}
			if err := o.write(d, "scheduler", def); err != nil {
				errs = append(errs, err)
				continue
			}
			reset = append(reset, d+"="+def)
		}
	}
	o.log().Error("disk queue record unreadable: set aside; disks behind the staging paths still on the window's scheduler set to the kernel's default (nr_requests follows), max_sectors_kb left as it is; delete the file once checked",
		"set_aside", to, "window_scheduler", o.Scheduler, "reset", strings.Join(reset, " "), "err", readErr, "failed", errors.Join(errs...))
}

// kernelDefault is the scheduler the kernel selects for a disk by itself
// (elevator_get_default): mq-deadline for a single hardware queue, none
// for several; "" when the one it would pick is not offered.
func (o Options) kernelDefault(disk string, offered []string) string {
	def := "none"
	if hw, err := os.ReadDir(filepath.Join(o.sys(), "block", disk, "mq")); err != nil || len(hw) <= 1 {
		def = "mq-deadline"
	}
	if !contains(offered, def) {
		return ""
	}
	return def
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func load(path string) (State, error) {
	var st State
	if path == "" {
		return st, nil
	}
	if _, err := atomicfile.ReadJSON(path, &st); err != nil {
		return State{}, fmt.Errorf("reading scheduler state: %w", err)
	}
	return st, nil
}

func save(path string, st State) error {
	if path == "" {
		return errors.New("saving scheduler state: no state file configured")
	}
	if err := atomicfile.WriteJSON(path, st); err != nil {
		return fmt.Errorf("saving scheduler state: %w", err)
	}
	return nil
}

func removeState(path string) error {
	if path == "" {
		return nil
	}
	if err := atomicfile.Remove(path); err != nil {
		return fmt.Errorf("removing scheduler state: %w", err)
	}
	return nil
}
