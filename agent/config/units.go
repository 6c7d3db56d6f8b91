package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/update-agent/update-agent/agent/iocost"
)

// Duration is a time.Duration written in TOML as a string such as "15m" or
// "1h30m" (time.ParseDuration syntax). A bare number is refused: "15" could
// mean seconds or minutes, and guessing wrong would be silent.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalTOML implements toml.Unmarshaler so that a non-string value gets
// a clear message instead of being formatted into a string and re-parsed.
func (d *Duration) UnmarshalTOML(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("must be a duration string like \"15m\", got %s", tomlTypeName(v))
	}
	return d.UnmarshalText([]byte(s))
}

// UnmarshalText parses a time.ParseDuration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("invalid duration %q (want e.g. \"90s\", \"15m\", \"1h30m\")", string(b))
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the shortest readable form ("2h", "1h30m", "500ms").
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// String is like time.Duration.String without the trailing zero units
// ("2h" rather than "2h0m0s").
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// MemorySize is a byte count in systemd's memory syntax: a number with an
// optional K, M, G or T suffix, base 1024 (as MemoryHigh= takes it), or
// "infinity" for no limit. Zero means no limit; MemorySizeAuto (written
// "auto") a bound each window chooses (iocost.MemoryAllowance).
type MemorySize uint64

// MemorySizeAuto is "auto": the window's pacing chooses the bound.
const MemorySizeAuto = MemorySize(^uint64(0))

func (m *MemorySize) UnmarshalTOML(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("must be a size string like \"256M\", \"auto\" or \"infinity\", got %s", tomlTypeName(v))
	}
	if s == "infinity" || s == "" {
		*m = 0
		return nil
	}
	if s == "auto" {
		*m = MemorySizeAuto
		return nil
	}
	n, err := parseSize(s, 1024)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("invalid size %q: use \"infinity\" for no limit", s)
	}
	*m = MemorySize(n)
	return nil
}

func (m MemorySize) String() string {
	switch m {
	case 0:
		return "infinity"
	case MemorySizeAuto:
		return "auto"
	}
	return formatSize(uint64(m), 1024)
}

// Bandwidth is a byte rate per second in systemd's IOWriteBandwidthMax=
// syntax: a number with an optional K, M, G or T suffix, base 1000 ("20M" is
// 20,000,000 bytes/s). Zero (written "" or "infinity") means no cap;
// BandwidthAuto (written "auto") a cap the agent paces itself.
type Bandwidth uint64

// BandwidthAuto is "auto": the rate controller sets the cap.
const BandwidthAuto = Bandwidth(^uint64(0))

func (b *Bandwidth) UnmarshalTOML(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("must be a rate string like \"20M\" (bytes/s, base 1000) or \"\", got %s", tomlTypeName(v))
	}
	if s == "" || s == "infinity" {
		*b = 0
		return nil
	}
	if s == "auto" {
		*b = BandwidthAuto
		return nil
	}
	n, err := parseSize(s, 1000)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("invalid rate %q: use \"\" for no cap", s)
	}
	*b = Bandwidth(n)
	return nil
}

func (b Bandwidth) String() string {
	if b == 0 {
		return ""
	}
	if b == BandwidthAuto {
		return "auto"
	}
	return formatSize(uint64(b), 1000)
}

// CPUWeight is systemd's CPUWeight=: 1-10000, or "idle". Idle is stored as
// 0, which is also how systemd sends it over D-Bus (CGROUP_WEIGHT_IDLE), so
// the value can be passed through unchanged.
type CPUWeight uint64

// CPUWeightIdle is CPUWeight=idle.
const CPUWeightIdle CPUWeight = 0

func (c *CPUWeight) UnmarshalTOML(v any) error {
	n, err := weightOr(v, "idle")
	*c = CPUWeight(n)
	return err
}

// weightOr parses a weight 1-10000 (an integer, or one in a string) or
// word, which is 0.
func weightOr(v any, word string) (uint64, error) {
	bad := func(got string) error { return fmt.Errorf("must be 1-10000 or %q, got %s", word, got) }
	switch x := v.(type) {
	case int64:
		if x < 1 || x > 10000 {
			return 0, bad(strconv.FormatInt(x, 10))
		}
		return uint64(x), nil
	case string:
		if x == word {
			return 0, nil
		}
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, bad(strconv.Quote(x))
		}
		return weightOr(n, word)
	}
	return 0, bad(tomlTypeName(v))
}

func (c CPUWeight) String() string {
	if c == CPUWeightIdle {
		return "idle"
	}
	return strconv.FormatUint(uint64(c), 10)
}

// EtcdIOWeight is staging.iocost_etcd_io_weight: the IOWeight= etcd's unit
// gets under iocost, 1-10000, or "auto" (EtcdIOWeightAuto): the agent
// decides from the staging paths' journal (iocost.EtcdWeight).
type EtcdIOWeight uint64

// EtcdIOWeightAuto is "auto".
const EtcdIOWeightAuto EtcdIOWeight = 0

func (w *EtcdIOWeight) UnmarshalTOML(v any) error {
	n, err := weightOr(v, "auto")
	*w = EtcdIOWeight(n)
	return err
}

func (w EtcdIOWeight) String() string {
	if w == EtcdIOWeightAuto {
		return "auto"
	}
	return strconv.FormatUint(uint64(w), 10)
}

var sizeSuffixes = []struct {
	s   string
	exp int
}{{"T", 4}, {"G", 3}, {"M", 2}, {"K", 1}, {"B", 0}, {"", 0}}

// parseSize parses "20M", "1.5G", "4096" with systemd's suffixes in the
// given base. Fractions are allowed as systemd allows them ("1.5G").
func parseSize(s string, base float64) (uint64, error) {
	bad := func() (uint64, error) {
		return 0, fmt.Errorf("invalid size %q (want a number with an optional K, M, G or T suffix, base %v)", s, base)
	}
	for _, suf := range sizeSuffixes {
		num, ok := strings.CutSuffix(s, suf.s)
		if !ok {
			continue
		}
		if num == "" || strings.ContainsAny(num, "+-eExX_ \t") {
			return bad()
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil || f < 0 {
			return bad()
		}
		v := f * math.Pow(base, float64(suf.exp))
		if v >= math.MaxUint64 {
			return bad()
		}
		return uint64(v), nil
	}
	return bad()
}

// formatSize writes n with the largest suffix that divides it exactly, so
// that formatting and parsing round-trip.
func formatSize(n uint64, base uint64) string {
	units := []string{"", "K", "M", "G", "T"}
	i := 0
	for i < len(units)-1 && n != 0 && n%base == 0 {
		n /= base
		i++
	}
	return strconv.FormatUint(n, 10) + units[i]
}

// tomlTypeName names the TOML type of a decoded value for error messages.
func tomlTypeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("%T", v)
}

// IOCostMode is staging.iocost: true (iocost on every staging disk, the
// model learned on the disk where iocost_models gives none), false,
// "with-model" (only on the disks iocost_models gives a model for; the
// write rate loop where it names none) or "auto" (true where the staging
// paths' journal orders data, "with-model" elsewhere: iocost.Mode).
type IOCostMode uint8

const (
	IOCostOff IOCostMode = iota
	IOCostOn
	IOCostWithModel
	IOCostAuto
)

// iocostModes is what staging.iocost accepts, for its errors.
const iocostModes = `true, false, "with-model" or "auto"`

// Mode is the mode as the stager and doctor decide with it.
func (m IOCostMode) Mode() iocost.Mode {
	switch m {
	case IOCostOn:
		return iocost.On
	case IOCostWithModel:
		return iocost.WithModel
	case IOCostAuto:
		return iocost.Auto
	}
	return iocost.Off
}

func (m *IOCostMode) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case bool:
		*m = IOCostOff
		if x {
			*m = IOCostOn
		}
		return nil
	case string:
		switch x {
		case "with-model":
			*m = IOCostWithModel
			return nil
		case "auto":
			*m = IOCostAuto
			return nil
		}
		return fmt.Errorf("must be %s, got %q", iocostModes, x)
	}
	return fmt.Errorf("must be %s, got %s", iocostModes, tomlTypeName(v))
}

func (m IOCostMode) String() string { return m.Mode().String() }
