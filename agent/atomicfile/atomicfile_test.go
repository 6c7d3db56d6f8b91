package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteReplacesAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	if err := Write(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("two"), 0o640); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "two" {
		t.Fatalf("content = %q, %v; want two", b, err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o640 {
		t.Errorf("mode = %v, want 0640", st.Mode().Perm())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries, want only the file (temp left behind?)", len(ents))
	}
}

func TestWriteMissingDirNamesPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "absent", "f")
	err := Write(p, nil, 0o600)
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("err = %v, want an error naming %s", err, p)
	}
}

// Every record is written the same way: indented JSON with a newline, mode
// 0600, its directory created 0700; it reads back, an absent one reads as
// not found, and removing it twice is fine.
func TestJSONRecord(t *testing.T) {
	type rec struct {
		A int    `json:"a"`
		B string `json:"b,omitempty"`
	}
	dir := filepath.Join(t.TempDir(), "state")
	p := filepath.Join(dir, "r.json")
	var got rec
	if found, err := ReadJSON(p, &got); found || err != nil {
		t.Fatalf("absent record: found %v, %v", found, err)
	}
	if err := WriteJSON(p, rec{A: 1, B: "x"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if string(b) != "{\n  \"a\": 1,\n  \"b\": \"x\"\n}\n" {
		t.Errorf("content %q", b)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v, want 0600", st.Mode().Perm())
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, want 0700", st.Mode().Perm())
	}
	if found, err := ReadJSON(p, &got); !found || err != nil || got != (rec{A: 1, B: "x"}) {
		t.Errorf("read back %+v, found %v, %v", got, found, err)
	}
	if err := Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := Remove(p); err != nil {
		t.Errorf("removing an absent record: %v", err)
	}
	if err := Remove(filepath.Join(dir, "absent", "r.json")); err != nil {
		t.Errorf("removing a record of an absent directory: %v", err)
	}
}

// Records written compact by older agents read back; unknown fields are
// ignored, except by ReadJSONStrict; a torn record names its file.
func TestReadJSONCompatAndStrict(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.json")
	os.WriteFile(p, []byte(`{"a":2,"old":true}`+"\n"), 0o600)
	var got struct {
		A int `json:"a"`
	}
	if found, err := ReadJSON(p, &got); !found || err != nil || got.A != 2 {
		t.Errorf("compact record: %+v, found %v, %v", got, found, err)
	}
	if _, err := ReadJSONStrict(p, &got); err == nil || !strings.Contains(err.Error(), `parsing `+p+`: json: unknown field "old"`) {
		t.Errorf("strict read of an unknown field: %v", err)
	}
	os.WriteFile(p, []byte(`{"a":`), 0o600)
	if _, err := ReadJSON(p, &got); err == nil || !strings.HasPrefix(err.Error(), "parsing "+p+": ") {
		t.Errorf("torn record: %v", err)
	}
}

// TestSetAside: a record that does not parse is ErrCorrupt (an I/O error is
// not), and set aside it is listed until it is deleted.
func TestSetAside(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "rec.json")
	if err := os.WriteFile(p, []byte(`{"a":`), 0o600); err != nil {
		t.Fatal(err)
	}
	var v struct{ A int }
	if _, err := ReadJSON(p, &v); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
		t.Fatalf("torn record: %v", err)
	}
	if _, err := ReadJSON(dir, &v); err == nil || errors.Is(err, ErrCorrupt) {
		t.Fatalf("a directory read as a record: %v", err)
	}
	to, err := SetAside(p, Corrupt, time.Date(2026, 12, 5, 7, 8, 9, 0, time.FixedZone("x", 3600)))
	if err != nil {
		t.Fatal(err)
	}
	if want := p + ".corrupt-20261205T060809Z"; to != want {
		t.Errorf("set aside as %s, want %s", to, want)
	}
	if found, err := ReadJSON(p, &v); found || err != nil {
		t.Errorf("the record is still there: %v %v", found, err)
	}
	if got, err := SetAsideIn(dir); err != nil || len(got) != 1 || got[0] != to {
		t.Errorf("listed %v, %v", got, err)
	}
	if got, err := SetAsideIn(filepath.Join(dir, "none")); err != nil || len(got) != 0 {
		t.Errorf("missing dir: %v, %v", got, err)
	}
}
