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
		Target:  Target{Checksum: "abc", Version: "42.1", Image: "registry.example/os@sha256:ab", Stream: "stable"},
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
	want.Version, want.Minor = schemaVersion, schemaMinor
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

// TestLoadSetsAsideUnusableRecords: a record this agent cannot use (torn,
// unknown fields of its own schema, another major, an unknown phase) never
// fails Load (a daemon exiting on it would restart forever): it is set
// aside, and the conservative record FromHost is returned and persisted, so
// the next start reads that.
func TestLoadSetsAsideUnusableRecords(t *testing.T) {
	for name, tc := range map[string]struct{ body, kind string }{
		"torn":          {`{"version":1,"phase":"sta`, ".corrupt-"},
		"unknown field": {`{"version":1,"phase":"idle","surprise":1}`, ".corrupt-"},
		"newer major":   {`{"version":2,"minor":1,"phase":"finalizing","locked":"abc","slot":{"n":1}}`, ".newer-"},
		"no version":    {`{"phase":"idle"}`, ".corrupt-"},
		"phase":         {`{"version":1,"phase":"dancing"}`, ".corrupt-"},
	} {
		t.Run(name, func(t *testing.T) {
			s := Store{Dir: t.TempDir(), Now: func() time.Time { return time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC) }}
			if err := os.WriteFile(s.Path(), []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			st, err := s.Load()
			if err != nil {
				t.Fatalf("Load failed on it (a daemon would restart forever): %v", err)
			}
			if st.Phase != Releasing || !st.Queued || !st.CheckHealth || st.Locked != "" {
				t.Errorf("record %+v, want FromHost's", st)
			}
			aside := s.Path() + tc.kind + "20261205T080000Z"
			if b, err := os.ReadFile(aside); err != nil || string(b) != tc.body {
				t.Errorf("set aside as %s: %q, %v", aside, b, err)
			}
			if !strings.Contains(st.LastError, aside) {
				t.Errorf("status does not say where it went: %q", st.LastError)
			}
			again, err := s.Load()
			if err != nil || !again.Equal(st) {
				t.Errorf("the next start reads %+v, %v; want %+v", again, err, st)
			}
		})
	}
}

// TestLoadNewerMinor: a newer agent of the same major that added fields
// (unknown here) and raised the minor: the fields this agent knows are
// read, and its own save writes its own schema.
func TestLoadNewerMinor(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	body := `{"version":1,"minor":4,"phase":"holding_slot","target":{"checksum":"abc"},"locked":"abc","queued":true,"lease_id":7,"boot_id":"b1","member_slot":{"name":"cp1"},"hooks_ran":true}`
	if err := os.WriteFile(s.Path(), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != HoldingSlot || st.Locked != "abc" || !st.Queued || st.LeaseID != 7 || st.BootID != "b1" || !st.HooksRan {
		t.Fatalf("read %+v", st)
	}
	if aside, _ := filepath.Glob(s.Path() + ".*"); len(aside) != 0 {
		t.Errorf("set aside: %v", aside)
	}
	if err := s.Save(st); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(s.Path())
	if strings.Contains(string(b), "member_slot") || !strings.Contains(string(b), `"minor": 1`) {
		t.Errorf("saved %s", b)
	}
}

// TestSaveWritesItsSchema: the record holds its schema, 1.1 since the
// target keeps an update graph's image and stream; a 1.0 agent (after an OS
// rollback) reads it for the fields it knows.
func TestSaveWritesItsSchema(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	if err := s.Save(State{Phase: Staging, Target: Target{Checksum: "sha256:ab", Image: "registry.example/os@sha256:ab", Stream: "stable"}}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(s.Path())
	if !strings.Contains(string(b), `"minor": 1`) || !strings.Contains(string(b), `"version": 1`) {
		t.Errorf("saved %s", b)
	}
	st, err := s.Load()
	if err != nil || st.Target.Image != "registry.example/os@sha256:ab" || st.Target.Stream != "stable" {
		t.Errorf("loaded %+v, %v", st.Target, err)
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
