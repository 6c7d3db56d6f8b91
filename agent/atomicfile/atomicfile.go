// Package atomicfile replaces files so that a crash at any moment leaves
// either the old or the new content on disk, never a torn file: write a
// temp file beside it, fsync, rename over it, fsync the directory so the
// rename itself is durable. Every record the agent must find again after a
// kill -9 or power cut (engine state, lease ID, undo journals, scheduler
// state, drop-ins) is written this way.
package atomicfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Write replaces path with data and mode perm. The directory must exist.
func Write(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err = SyncDir(dir); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// SyncDir fsyncs a directory, making renames and removals in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// The agent's JSON records (engine state, lease, staging undo journal,
// scheduler state) all go through WriteJSON, ReadJSON and Remove: one
// format (indented, a trailing newline), one mode (0600 in a 0700
// directory), every change synced with its directory.

// RecordMode is the mode of a record; its directory is created 0700.
const RecordMode os.FileMode = 0o600

// WriteJSON replaces path with v, creating the directory if needed.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return Write(path, append(b, '\n'), RecordMode)
}

// ReadJSON reads the record at path into v; found is false when there is
// none. Fields v does not know are ignored (an older or newer agent's
// record still reads); ReadJSONStrict refuses them.
func ReadJSON(path string, v any) (found bool, err error) {
	return readJSON(path, v, false)
}

// ReadJSONStrict is ReadJSON refusing fields v does not know, for records
// with a schema version.
func ReadJSONStrict(path string, v any) (found bool, err error) {
	return readJSON(path, v, true)
}

func readJSON(path string, v any, strict bool) (bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err // names the path
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return true, fmt.Errorf("parsing %s: %w", path, corrupt{err})
	}
	return true, nil
}

// ErrCorrupt: the record was read but is not what its reader can parse
// (torn by a disk fault, edited, or of another schema). errors.Is finds
// it in ReadJSON's and ReadJSONStrict's errors; an I/O error is not it.
var ErrCorrupt = errors.New("corrupt record")

// corrupt marks a parse error as ErrCorrupt and keeps its text.
type corrupt struct{ err error }

func (c corrupt) Error() string        { return c.err.Error() }
func (c corrupt) Unwrap() error        { return c.err }
func (c corrupt) Is(target error) bool { return target == ErrCorrupt }

// Why a record is set aside; the kind is in its new name.
const (
	// Corrupt: it does not parse.
	Corrupt = "corrupt"
	// Newer: a newer agent wrote it, in a schema this one cannot read.
	Newer = "newer"
)

// SetAside renames a record its reader cannot use to
// <name>.<kind>-<now, UTC>, durably, and returns the new path: the agent
// goes on without it, and an operator can still read it (doctor reports it
// until it is deleted).
func SetAside(path, kind string, now time.Time) (string, error) {
	to := path + "." + kind + "-" + now.UTC().Format("20060102T150405Z")
	if err := os.Rename(path, to); err != nil {
		return "", fmt.Errorf("setting aside %s: %w", path, err)
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		return "", fmt.Errorf("setting aside %s: %w", path, err)
	}
	return to, nil
}

// SetAsideIn lists the records set aside in dir (doctor fails on them); a
// directory that does not exist holds none.
func SetAsideIn(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); strings.Contains(n, "."+Corrupt+"-") || strings.Contains(n, "."+Newer+"-") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// Remove removes the record at path, durably; a record already gone is
// not an error.
func Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err // names the path
	}
	// Synced even when the record was gone: its removal by a process
	// killed before syncing becomes durable now. No directory, no record.
	if err := SyncDir(filepath.Dir(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
