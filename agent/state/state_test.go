package state

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLoadMissingIsIdle(t *testing.T) {
	st, err := Store{Dir: t.TempDir()}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != Idle || st.LeaseID != 0 || st.Locked != "" {
		t.Fatalf("got %+v, want an empty idle record", st)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	s := Store{Dir: filepath.Join(t.TempDir(), "nested")}
	want := State{
		Phase:   Finalizing,
		Target:  Target{Checksum: "abc", Version: "42.1"},
		Locked:  "abc",
		LeaseID: 7587,
		BootID:  "b1",
		Since:   time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC),
		Failures: map[string]Failure{
			"old": {Count: 3, SetAside: true, LastError: "boom"},
		},
	}
	if err := s.Save(want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	want.Version = schemaVersion
	if !got.Equal(want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	// No temp files left beside the record.
	ents, _ := os.ReadDir(s.Dir)
	if len(ents) != 1 {
		t.Errorf("state dir holds %d entries, want only %s", len(ents), FileName)
	}
}

func TestSaveReplacesAndKeepsOldOnFailure(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	if err := s.Save(State{Phase: Staged, Locked: "one"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(State{Phase: WaitingSlot, Locked: "one", LeaseID: 9}); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Load()
	if got.Phase != WaitingSlot || got.LeaseID != 9 {
		t.Fatalf("got %+v", got)
	}
	// A write that fails half way, for root too: the file size limit
	// (RLIMIT_FSIZE) cuts the new record's bytes short with EFBIG (the Go
	// runtime ignores SIGXFSZ). Whatever Save does with the old record
	// before or while writing shows: replaced in place, it would be torn.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	small := lim
	small.Cur = 16
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &small); err != nil {
		t.Fatal(err)
	}
	err := s.Save(State{Phase: Idle, LastError: strings.Repeat("x", 64)})
	if rerr := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		t.Fatal("a save cut short by the file size limit succeeded")
	}
	got, err = s.Load()
	if err != nil || got.Phase != WaitingSlot || got.LeaseID != 9 {
		t.Fatalf("failed save changed the record: %+v, %v", got, err)
	}
	if ents, _ := os.ReadDir(s.Dir); len(ents) != 1 {
		t.Errorf("state dir holds %d entries after the failed save, want only %s", len(ents), FileName)
	}
}

func TestLoadRejectsBadRecords(t *testing.T) {
	for name, body := range map[string]string{
		"torn":          `{"version":1,"phase":"sta`,
		"unknown field": `{"version":1,"phase":"idle","surprise":1}`,
		"version":       `{"version":99,"phase":"idle"}`,
		"phase":         `{"version":1,"phase":"dancing"}`,
	} {
		t.Run(name, func(t *testing.T) {
			s := Store{Dir: t.TempDir()}
			if err := os.WriteFile(s.Path(), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := s.Load()
			if err == nil {
				t.Fatal("bad record accepted")
			}
			if !strings.Contains(err.Error(), s.Path()) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestCloneIsDeep(t *testing.T) {
	a := State{Failures: map[string]Failure{"x": {Count: 1}}}
	a.Announced = []string{"m1"}
	b := a.Clone()
	b.Failures["x"] = Failure{Count: 2}
	b.Announced[0] = "m2"
	if a.Announced[0] != "m1" {
		t.Fatal("Clone shares the announced members")
	}
	if a.Failures["x"].Count != 1 {
		t.Fatal("Clone shares the failures map")
	}
}

func TestReadBootID(t *testing.T) {
	p := filepath.Join(t.TempDir(), "boot_id")
	os.WriteFile(p, []byte("4f1c\n"), 0o600)
	id, err := ReadBootID(p)
	if err != nil || id != "4f1c" {
		t.Fatalf("got %q, %v", id, err)
	}
	os.WriteFile(p, []byte("\n"), 0o600)
	if _, err := ReadBootID(p); err == nil {
		t.Fatal("empty boot ID accepted")
	}
}
