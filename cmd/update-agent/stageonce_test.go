package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStartCPUProfile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := startCPUProfile(p)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
		t.Errorf("profile %s: %v %v", p, fi, err)
	}
	if _, err := startCPUProfile(filepath.Join(t.TempDir(), "missing", "cpu.pprof")); err == nil || !strings.Contains(err.Error(), "creating the CPU profile") {
		t.Errorf("profile in a missing directory: %v", err)
	}
}
