package owner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCDSigns: the daemon's state directory or a process whose argv[0]
// is the machine-config-daemon shows it; comm alone (cut to 15 bytes) and
// other processes do not.
func TestMCDSigns(t *testing.T) {
	for _, tt := range []struct {
		name  string
		files map[string]string // path under a temp dir -> content ("/" suffix: a directory)
		want  string            // substring of the signs, "" = none
	}{
		{"nothing", map[string]string{"proc/1/cmdline": "/usr/lib/systemd/systemd\x00--switched-root\x00"}, ""},
		{"state directory", map[string]string{"root/etc/machine-config-daemon/": "", "proc/1/cmdline": "init\x00"}, "/etc/machine-config-daemon exists"},
		{"process", map[string]string{"proc/4242/cmdline": "/usr/bin/machine-config-daemon\x00start\x00--node-name\x00n1\x00"}, "process 4242 runs /usr/bin/machine-config-daemon"},
		{"comm only", map[string]string{"proc/7/comm": "machine-config-\n", "proc/7/cmdline": "bash\x00"}, ""},
		{"a file, not the directory", map[string]string{"root/etc/machine-config-daemon": "x", "proc/1/cmdline": "init\x00"}, ""},
		{"a name that only contains it", map[string]string{"proc/9/cmdline": "/usr/bin/machine-config-daemon-helper\x00"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for p, c := range tt.files {
				full := filepath.Join(dir, p)
				if strings.HasSuffix(p, "/") {
					if err := os.MkdirAll(full, 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := MCD{Root: filepath.Join(dir, "root"), Proc: filepath.Join(dir, "proc")}.Signs()
			if err != nil {
				t.Fatal(err)
			}
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("signs %q, want %q", got, tt.want)
			}
		})
	}
}

// TestDescribeMCD: under the MCO, updates.enabled = true fails naming the
// key and its file; false is the companion, said out loud.
func TestDescribeMCD(t *testing.T) {
	for _, tt := range []struct {
		name    string
		signs   string
		enabled bool
		want    string
		fail    bool
	}{
		{"not under the MCO", "", true, "no machine-config-daemon on this host", false},
		{"updates on", "process 1 runs machine-config-daemon", true,
			"must not drive updates here, only pace them as a companion; set updates.enabled = false (now true, from /etc/update-agent/config.d/50-x.toml)", true},
		{"companion", "process 1 runs machine-config-daemon", false, "must not drive updates here, only pace them as a companion; updates.enabled = false", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DescribeMCD(tt.signs, tt.enabled, "/etc/update-agent/config.d/50-x.toml")
			if err != nil {
				got = err.Error()
			}
			if (err != nil) != tt.fail || !strings.Contains(got, tt.want) {
				t.Errorf("got %q (error %v), want %q (fail %v)", got, err != nil, tt.want, tt.fail)
			}
		})
	}
}
