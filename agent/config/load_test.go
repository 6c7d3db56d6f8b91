package config

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const (
	usrDir = "/usr/lib/update-agent/config.d/"
	runDir = "/run/update-agent/config.d/"
	etcDir = "/etc/update-agent/config.d/"
	// devNull as a file's content makes writeTree create a mask symlink.
	devNull = "->/dev/null"
)

// writeTree creates files (path relative to root -> content) under a new
// temp root and returns the root.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// stripped returns cfg without its sources, for comparing values.
func stripped(c *Config) Config {
	v := *c
	v.src = nil
	return v
}

func TestLayering(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		check func(t *testing.T, c *Config, s *Sources)
	}{
		{
			name:  "no files gives defaults",
			files: map[string]string{},
			check: func(t *testing.T, c *Config, s *Sources) {
				if !reflect.DeepEqual(stripped(c), stripped(Default())) {
					t.Errorf("config differs from Default()")
				}
				if s.File("lock.slots") != DefaultSource {
					t.Errorf("source %q", s.File("lock.slots"))
				}
			},
		},
		{
			name: "etc replaces same name in run and usr/lib",
			files: map[string]string{
				usrDir + "50-lock.toml": "[lock]\nslots = 2\ngroup = \"usr\"\n",
				runDir + "50-lock.toml": "[lock]\nslots = 3\n",
				etcDir + "50-lock.toml": "[lock]\nslots = 4\n",
			},
			check: func(t *testing.T, c *Config, s *Sources) {
				// The /usr/lib file is replaced whole: its group is gone.
				if c.Lock.Slots != 4 || c.Lock.Group != "default" {
					t.Errorf("slots=%d group=%q, want 4 default", c.Lock.Slots, c.Lock.Group)
				}
				if got := s.File("lock.slots"); !strings.HasSuffix(got, etcDir+"50-lock.toml") {
					t.Errorf("source %q", got)
				}
				if len(s.Fragments) != 1 || len(s.Overridden) != 2 {
					t.Errorf("fragments %v overridden %v", s.Fragments, s.Overridden)
				}
			},
		},
		{
			name: "run replaces usr/lib",
			files: map[string]string{
				usrDir + "50-lock.toml": "[lock]\nslots = 2\n",
				runDir + "50-lock.toml": "[lock]\nslots = 3\n",
			},
			check: func(t *testing.T, c *Config, s *Sources) {
				if c.Lock.Slots != 3 {
					t.Errorf("slots=%d, want 3", c.Lock.Slots)
				}
			},
		},
		{
			name: "merge in file-name order across directories, only defined keys",
			files: map[string]string{
				etcDir + "10-a.toml": "[lock]\nslots = 2\ngroup = \"a\"\n",
				usrDir + "20-b.toml": "[lock]\nslots = 5\n",
				runDir + "30-c.toml": "[staging]\nnice = 5\n",
			},
			check: func(t *testing.T, c *Config, s *Sources) {
				if c.Lock.Slots != 5 || c.Lock.Group != "a" || c.Staging.Nice != 5 {
					t.Errorf("slots=%d group=%q nice=%d", c.Lock.Slots, c.Lock.Group, c.Staging.Nice)
				}
				if !strings.HasSuffix(s.File("lock.group"), "10-a.toml") || !strings.HasSuffix(s.File("lock.slots"), "20-b.toml") {
					t.Errorf("sources group=%q slots=%q", s.File("lock.group"), s.File("lock.slots"))
				}
				if c.Staging.IOWeight != 10 || s.File("staging.io_weight") != DefaultSource {
					t.Errorf("untouched key changed: %d from %q", c.Staging.IOWeight, s.File("staging.io_weight"))
				}
			},
		},
		{
			name: "arrays are replaced whole, not merged element-wise",
			files: map[string]string{
				usrDir + "10-a.toml": "[[reboot.hooks]]\nargv = [\"/bin/a\", \"x\"]\ntimeout = \"5m\"\n[[reboot.hooks]]\nargv = [\"/bin/b\"]\ntimeout = \"1m\"\n",
				usrDir + "20-b.toml": "[[reboot.hooks]]\nargv = [\"/bin/c\"]\ntimeout = \"2m\"\n[staging]\npaths = [\"/var\"]\n",
			},
			check: func(t *testing.T, c *Config, s *Sources) {
				want := []Hook{{Argv: []string{"/bin/c"}, Timeout: Duration(2 * time.Minute)}}
				if !reflect.DeepEqual(c.Reboot.Hooks, want) {
					t.Errorf("hooks %+v", c.Reboot.Hooks)
				}
				if !reflect.DeepEqual(c.Staging.Paths, []string{"/var"}) {
					t.Errorf("paths %v", c.Staging.Paths)
				}
			},
		},
		{
			name: "symlink to /dev/null masks, in any directory above",
			files: map[string]string{
				usrDir + "50-lock.toml": "[lock]\nslots = 2\n",
				etcDir + "50-lock.toml": devNull,
				usrDir + "60-x.toml":    "[staging]\nnice = 3\n",
			},
			check: func(t *testing.T, c *Config, s *Sources) {
				if c.Lock.Slots != 1 || c.Staging.Nice != 3 {
					t.Errorf("slots=%d nice=%d", c.Lock.Slots, c.Staging.Nice)
				}
				if len(s.Masked) != 1 || !strings.HasSuffix(s.Masked[0], etcDir+"50-lock.toml") {
					t.Errorf("masked %v", s.Masked)
				}
			},
		},
		{
			name: "a symlinked fragment is read",
			files: map[string]string{
				"/srv/shared/lock.toml": "[lock]\nslots = 6\n",
				etcDir + "50-lock.toml": "->../../../srv/shared/lock.toml",
			},
			check: func(t *testing.T, c *Config, s *Sources) {
				if c.Lock.Slots != 6 || len(s.Masked) != 0 {
					t.Errorf("slots=%d masked=%v", c.Lock.Slots, s.Masked)
				}
			},
		},
		{
			name: "a fragment in /etc overrides a mask below it",
			files: map[string]string{
				runDir + "50-lock.toml": devNull,
				etcDir + "50-lock.toml": "[lock]\nslots = 7\n",
			},
			check: func(t *testing.T, c *Config, s *Sources) {
				if c.Lock.Slots != 7 || len(s.Masked) != 0 {
					t.Errorf("slots=%d masked=%v", c.Lock.Slots, s.Masked)
				}
			},
		},
		{
			name: "other extensions are reported, not read",
			files: map[string]string{
				etcDir + "50-lock.conf":     "[lock]\nslots = 9\n",
				etcDir + "50-lock.toml.bak": "[lock]\nslots = 9\n",
			},
			check: func(t *testing.T, c *Config, s *Sources) {
				if c.Lock.Slots != 1 {
					t.Errorf("slots=%d", c.Lock.Slots)
				}
				if len(s.Warnings) != 2 || !strings.Contains(s.Warnings[0], "50-lock.conf: ignored: only *.toml files are read") {
					t.Errorf("warnings %q", s.Warnings)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeTree(t, tt.files)
			c, s, err := Load(root)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			tt.check(t, c, s)
		})
	}
}

func TestLoadErrorsNameFileAndKey(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string // each must appear in the error
	}{
		{"unknown key", map[string]string{etcDir + "50-lock.toml": "[lock]\nslot = 2\n"},
			[]string{etcDir + "50-lock.toml: lock.slot: unknown key (did you mean lock.slots?)"}},
		{"unknown section reported once", map[string]string{etcDir + "50-x.toml": "[lokc]\nslots = 2\nx = 1\n"},
			[]string{etcDir + "50-x.toml: lokc: unknown section (did you mean [lock]?)"}},
		{"a top-level key is matched as a key", map[string]string{etcDir + "50-x.toml": "slots = 2\n"},
			[]string{etcDir + "50-x.toml: slots: unknown key outside any section (did you mean lock.slots?)"}},
		{"zincati's strategy", map[string]string{etcDir + "50-z.toml": "[updates]\nstrategy = \"fleet_lock\"\n"},
			[]string{etcDir + "50-z.toml: updates.strategy: unknown key: zincati's key: use reboot.strategy"}},
		{"zincati's periodic table, reported once", map[string]string{etcDir + "50-z.toml": "[updates.periodic]\ntime_zone = \"UTC\"\n" +
			"[[updates.periodic.window]]\ndays = [\"Mon\"]\nstart_time = \"22:00\"\nlength_minutes = 60\n"},
			[]string{etcDir + "50-z.toml: updates.periodic: unknown key: zincati's table: use reboot.strategy = \"periodic\", reboot.time_zone and [[reboot.windows]]"}},
		{"zincati's fleet_lock table", map[string]string{etcDir + "50-z.toml": "[updates.fleet_lock]\nbase_url = \"http://fl\"\n"},
			[]string{etcDir + "50-z.toml: updates.fleet_lock: unknown key: zincati's table: the agent takes its reboot slot in etcd itself: set etcd.endpoints and lock.group"}},
		{"zincati's timing", map[string]string{etcDir + "50-z.toml": "[agent.timing]\nsteady_interval_secs = 300\n"},
			[]string{etcDir + "50-z.toml: agent.timing: unknown key: zincati's table: use agent.check_interval"}},
		{"a removed key", map[string]string{etcDir + "50-s.toml": "[staging]\niocost_etcd_feedback = false\n"},
			[]string{etcDir + "50-s.toml: staging.iocost_etcd_feedback: removed: the vrate ceiling it set from etcd's latency sank to its floor and staging crawled without holding etcd (docs/benchmarks.md); delete the line"}},
		{"unknown key in a hook", map[string]string{etcDir + "50-x.toml": "[[reboot.hooks]]\nargv = [\"/bin/a\"]\ntimeout = \"1m\"\ncmd = \"x\"\n"},
			[]string{etcDir + "50-x.toml: reboot.hooks[].cmd: unknown key"}},
		{"wrong type", map[string]string{etcDir + "50-lock.toml": "[lock]\nslots = \"two\"\n"},
			[]string{etcDir + "50-lock.toml: lock.slots: must be a whole number (no quotes), got a string (line 2)"}},
		{"wrong types in the config's words", map[string]string{etcDir + "50-x.toml": "[lock]\nenabled = \"yes\"\n[etcd]\nendpoints = \"https://e:2379\"\n"},
			[]string{etcDir + "50-x.toml: lock.enabled: must be true or false (no quotes), got a string (line 2)",
				etcDir + "50-x.toml: etcd.endpoints: must be a list, like [\"a\", \"b\"], got a string (line 4)"}},
		{"bad duration", map[string]string{etcDir + "50-lock.toml": "[lock]\nreboot_lease_ttl = \"15 minutes\"\n"},
			[]string{etcDir + "50-lock.toml: lock.reboot_lease_ttl: invalid duration \"15 minutes\""}},
		{"duration as a number", map[string]string{etcDir + "50-lock.toml": "[lock]\nreboot_lease_ttl = 900\n"},
			[]string{etcDir + "50-lock.toml: lock.reboot_lease_ttl: must be a duration string like \"15m\", got an integer"}},
		{"a section that is not a table", map[string]string{etcDir + "50-x.toml": "lock = 5\n"},
			[]string{etcDir + "50-x.toml: lock: must be a table ([lock])"}},
		{"syntax error", map[string]string{etcDir + "50-lock.toml": "[lock\nslots = 2\n"},
			[]string{etcDir + "50-lock.toml: expected", "(line 2)"}},
		{"every error is reported, across files", map[string]string{
			usrDir + "10-a.toml": "[lock]\nslots = 0\n",
			etcDir + "20-b.toml": "[staging]\nnice = 40\nio_weight = 0\n",
			runDir + "30-c.toml": "[agent]\nbogus = 1\n"},
			[]string{usrDir + "10-a.toml: lock.slots: must be >= 1, got 0",
				etcDir + "20-b.toml: staging.nice: must be -20-19, got 40",
				etcDir + "20-b.toml: staging.io_weight: must be 1-10000, got 0",
				runDir + "30-c.toml: agent.bogus: unknown key"}},
		{"a later fragment's bad value names that fragment", map[string]string{
			usrDir + "10-a.toml": "[lock]\nslots = 3\n",
			etcDir + "90-z.toml": "[lock]\nslots = -1\n"},
			[]string{etcDir + "90-z.toml: lock.slots: must be >= 1, got -1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeTree(t, tt.files)
			_, _, err := Load(root)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error\n%s\ndoes not contain %q", msg, w)
				}
			}
		})
	}
}

func TestUnreadableFragmentIsAnError(t *testing.T) {
	root := writeTree(t, map[string]string{etcDir + "50-x.toml": "->/nonexistent/target.toml"})
	_, _, err := Load(root)
	if err == nil || !strings.Contains(err.Error(), "50-x.toml: reading:") {
		t.Fatalf("err = %v", err)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	root := writeTree(t, map[string]string{
		etcDir + "50-x.toml": `
[lock]
slots = 2
group = "workers"
[staging]
cpu_weight = 50
memory_high = "1536M"
io_write_bandwidth_max = "20M"
[reboot]
strategy = "periodic"
time_zone = "Europe/Berlin"
[[reboot.windows]]
days = ["Sat", "Sun"]
start = "22:30"
length = "3h"
[[reboot.windows]]
days = ["Mon"]
start_time = "01:00"
length_minutes = 90
[[reboot.hooks]]
argv = ["/usr/bin/echo", "quote \" and \\ backslash"]
timeout = "90s"
`,
	})
	c, s, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Encode(&out, c, s); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, w := range []string{
		"slots = 2  # " + filepath.Join(root, etcDir, "50-x.toml"),
		"io_weight = 10  # default",
		"memory_high = \"1536M\"",
		"# reboot.hooks: " + filepath.Join(root, etcDir, "50-x.toml"),
		"windows = []", // not expected: windows are set
		"start_time = \"01:00\"\nlength_minutes = 90\n",
	} {
		if strings.Contains(text, w) == (w == "windows = []") {
			t.Errorf("output contains %q = %v:\n%s", w, !strings.Contains(text, w), text)
		}
	}
	// Reading the output back gives the same configuration.
	root2 := writeTree(t, map[string]string{etcDir + "00-all.toml": text})
	c2, _, err := Load(root2)
	if err != nil {
		t.Fatalf("reloading the encoded config: %v\n%s", err, text)
	}
	if !reflect.DeepEqual(stripped(c), stripped(c2)) {
		t.Errorf("round trip differs:\n%+v\n%+v", stripped(c), stripped(c2))
	}
}

func TestSourcesFileOfElements(t *testing.T) {
	s := &Sources{Keys: map[string]string{"reboot.hooks": "/x.toml", "lock.slots": "default"}}
	for key, want := range map[string]string{
		"reboot.hooks[1].argv": "/x.toml",
		"reboot.hooks":         "/x.toml",
		"lock.slots":           "default",
		"nope.nope":            "default",
	} {
		if got := s.File(key); got != want {
			t.Errorf("File(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestPaths(t *testing.T) {
	got := Paths("/srv/root")
	want := []string{"/srv/root/usr/lib/update-agent/config.d", "/srv/root/run/update-agent/config.d", "/srv/root/etc/update-agent/config.d"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Paths = %v", got)
	}
}
