package standin

import (
	"fmt"
	"os"
	"strings"
)

// opt is one GOption-style option: --long, --long=ARG, --long ARG, -s.
type opt struct {
	long  string
	short byte
	arg   bool
}

// Options every transaction verb shares (rpm-ostree's common entries).
var commonOpts = []opt{{long: "os", arg: true}, {long: "stateroot", arg: true}, {long: "sysroot", arg: true},
	{long: "peer"}, {long: "quiet", short: 'q'}}

// parsed is the result of parseOpts.
type parsed struct {
	set  map[string]string
	args []string
}

func (p parsed) has(long string) bool { _, ok := p.set[long]; return ok }

func (p parsed) str(long string) (string, bool) { v, ok := p.set[long]; return v, ok }

// parseOpts parses args like GOption: options may come anywhere, "--" ends
// them, unknown ones are errors.
func parseOpts(args []string, specs ...[]opt) (parsed, error) {
	p := parsed{set: map[string]string{}}
	find := func(long string, short byte) (opt, bool) {
		for _, l := range specs {
			for _, o := range l {
				if (long != "" && o.long == long) || (short != 0 && o.short == short) {
					return o, true
				}
			}
		}
		return opt{}, false
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			p.args = append(p.args, args[i+1:]...)
			return p, nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			o, ok := find(name, 0)
			if !ok {
				return p, fmt.Errorf("Unknown option %s", a)
			}
			if o.arg && !hasVal {
				if i+1 >= len(args) {
					return p, fmt.Errorf("Missing argument for %s", a)
				}
				i++
				val = args[i]
			}
			p.set[o.long] = val
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				o, ok := find("", a[j])
				if !ok {
					return p, fmt.Errorf("Unknown option -%c", a[j])
				}
				val := ""
				if o.arg {
					if j+1 < len(a) {
						val = a[j+1:]
					} else if i+1 < len(args) {
						i++
						val = args[i]
					} else {
						return p, fmt.Errorf("Missing argument for -%c", a[j])
					}
					p.set[o.long] = val
					break
				}
				p.set[o.long] = val
			}
		default:
			p.args = append(p.args, a)
		}
	}
	return p, nil
}

// callerUnit is the systemd unit this process runs in, as rpm-ostree finds
// it for the update-driver check: the last .service or .scope in our cgroup.
func callerUnit() string {
	if u := os.Getenv(EnvCallerUnit); u != "" {
		return u
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[0] != "0" {
			continue
		}
		segs := strings.Split(parts[2], "/")
		for i := len(segs) - 1; i >= 0; i-- {
			if strings.HasSuffix(segs[i], ".service") || strings.HasSuffix(segs[i], ".scope") {
				return segs[i]
			}
		}
	}
	return ""
}
