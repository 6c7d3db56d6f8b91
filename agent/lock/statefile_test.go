package lock

import (
	"os"
	"path/filepath"
	"testing"
)

// A lease record written by an agent before the shared record store
// (compact JSON) is read by this one: an agent upgraded in place while it
// holds a slot must re-adopt it after the reboot.
func TestLeaseStateReadsOlderRecord(t *testing.T) {
	dir := t.TempDir()
	old := `{"lease_id":7587869021931335178,"group":"default","node":"n1","prefix":"/update-agent/lock"}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, leaseFileName), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	s, found, err := readLeaseState(dir)
	want := leaseState{LeaseID: 7587869021931335178, Group: "default", Node: "n1", Prefix: "/update-agent/lock"}
	if err != nil || !found || s != want {
		t.Fatalf("read %+v, found %v, %v; want %+v", s, found, err, want)
	}
	if err := writeLeaseState(dir, s); err != nil {
		t.Fatal(err)
	}
	if s, found, err = readLeaseState(dir); err != nil || !found || s != want {
		t.Errorf("round trip %+v, found %v, %v", s, found, err)
	}
	if err := removeLeaseState(dir); err != nil {
		t.Fatal(err)
	}
	if _, found, err = readLeaseState(dir); found || err != nil {
		t.Errorf("after removal: found %v, %v", found, err)
	}
}
