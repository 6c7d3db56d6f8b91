package rpmpkg

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckPayload(t *testing.T) {
	type file struct {
		mode    os.FileMode
		content string
	}
	const bin, unit = "usr/bin/update-agent", "usr/lib/systemd/system/update-agent.service"
	for _, tc := range []struct {
		name    string
		files   map[string]file
		wantErr string // "" for no error
	}{
		{"empty", nil, "lacks /" + bin},
		{"no unit", map[string]file{bin: {0o755, "ELF"}}, "lacks /" + unit},
		{"binary not executable", map[string]file{bin: {0o644, "ELF"}, unit: {0o644, "[Unit]"}}, "not executable"},
		{"empty binary", map[string]file{bin: {0o755, ""}, unit: {0o644, "[Unit]"}}, "want a non-empty file"},
		{"complete", map[string]file{bin: {0o755, "ELF"}, unit: {0o644, "[Unit]"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, f := range tc.files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(f.content), f.mode); err != nil {
					t.Fatal(err)
				}
			}
			err := checkPayload(dir)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("checkPayload: %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("checkPayload: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
