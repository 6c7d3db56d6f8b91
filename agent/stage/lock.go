package stage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrBusy is returned when another process (the daemon, or stage-once) is
// staging or recovering on this host.
var ErrBusy = errors.New("another staging is in progress on this host")

// lock takes the host's staging lock: without it, one process's Recover
// would take another's running staging for a crashed one and undo it. The
// kernel drops the lock with its holder, so a crash never leaves it held.
func (s *Stager) lock() (unlock func(), err error) {
	p := filepath.Join(s.o.StateDir, "staging.lock")
	if err := os.MkdirAll(s.o.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("taking the staging lock %s: %w", p, err)
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("taking the staging lock %s: %w", p, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s is held)", ErrBusy, p)
		}
		return nil, fmt.Errorf("taking the staging lock %s: %w", p, err)
	}
	s.held = f
	return func() { f.Close() }, nil
}
