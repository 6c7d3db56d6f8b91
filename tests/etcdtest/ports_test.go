package etcdtest

import (
	"errors"
	"net"
	"testing"
)

func TestPortBand(t *testing.T) {
	for _, tc := range []struct {
		name             string
		elo, ehi, lo, hi int
	}{
		{"Linux default: below it", 32768, 60999, 20000, 32768},
		{"range from 40000: below it", 40000, 65535, 20000, 40000},
		{"range up to 30000: above it", 10000, 30000, 30001, 65536},
		{"range covering everything: the fixed band", 1024, 65535, portLow, portHigh},
		{"unknown range: the fixed band", 0, 0, portLow, portHigh},
	} {
		lo, hi := portBand(tc.elo, tc.ehi)
		if lo != tc.lo || hi != tc.hi {
			t.Errorf("%s: portBand(%d, %d) = [%d, %d), want [%d, %d)", tc.name, tc.elo, tc.ehi, lo, hi, tc.lo, tc.hi)
		}
	}
}

func TestAddrInUseSeesARealBindError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = net.Listen("tcp", l.Addr().String())
	if err == nil || !addrInUse(err) {
		t.Fatalf("second bind of %s: %v, want an address-in-use error", l.Addr(), err)
	}
	if addrInUse(errors.New("connection refused")) {
		t.Fatal("addrInUse(connection refused) = true")
	}
}
