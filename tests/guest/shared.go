package guest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
)

var shared struct {
	mu      sync.Mutex
	inMain  bool
	started bool
	g       *Guest
	err     error
}

// Main runs the tests of a package that uses Shared and stops the shared
// guest afterwards, so no qemu outlives the test binary. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { guest.Main(m) }
func Main(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.g != nil {
		shared.g.Stop()
	}
	return code
}

// Shared returns the guest shared by the tests of this test binary, booting
// it on first use (default Options). A failed boot fails every caller with
// the same error instead of booting again. Tests that change the guest
// (throttling, units) undo it in t.Cleanup.
func Shared(t testing.TB) *Guest {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		t.Fatal("guest.Shared needs the package's TestMain to call guest.Main(m) (it stops the guest)")
	}
	if !shared.started {
		shared.started = true
		shared.g, shared.err = Start(context.Background(), Options{})
	}
	if shared.err != nil {
		t.Fatalf("shared test guest: %v", shared.err)
	}
	if shared.g.exited() {
		t.Fatalf("shared test guest: qemu exited (%v): %s\n%s", shared.g.qemuExit(), shared.g.qemuStderr(), shared.g.consoleTail(60))
	}
	return shared.g
}

// String names the guest for logs.
func (g *Guest) String() string {
	return fmt.Sprintf("guest(%s, 127.0.0.1:%d)", g.accel, g.port)
}
