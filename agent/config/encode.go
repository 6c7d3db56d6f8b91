package config

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// Encode writes cfg as TOML that Load would read back to the same values,
// each value followed by a comment naming the file it came from (from
// src; "default" for built-in defaults, or when src is nil).
func Encode(w io.Writer, cfg *Config, src *Sources) error {
	var b strings.Builder
	b.WriteString("# update-agent configuration, merged")
	if src != nil && len(src.Fragments) > 0 {
		b.WriteString(" from, in order:\n")
		for _, f := range src.Fragments {
			fmt.Fprintf(&b, "#   %s\n", f)
		}
	} else {
		b.WriteString(": built-in defaults only\n")
	}
	if src != nil {
		for _, f := range src.Masked {
			fmt.Fprintf(&b, "# masked (symlink to /dev/null): %s\n", f)
		}
		for lower, upper := range sortedMap(src.Overridden) {
			fmt.Fprintf(&b, "# overridden: %s by %s\n", lower, upper)
		}
		for _, d := range src.Derived {
			fmt.Fprintf(&b, "# default from the host: %s\n", d)
		}
	}
	rv := reflect.ValueOf(cfg).Elem()
	rt := rv.Type()
	for i := 0; i < rt.NumField(); i++ {
		section := tomlName(rt.Field(i))
		if section == "" {
			continue
		}
		sv := rv.Field(i)
		fmt.Fprintf(&b, "\n[%s]\n", section)
		var tables []int // non-empty arrays of tables go after the scalars
		for j := 0; j < sv.NumField(); j++ {
			name := tomlName(sv.Type().Field(j))
			fv := sv.Field(j)
			key := section + "." + name
			if isTableArray(fv) && fv.Len() > 0 {
				tables = append(tables, j)
				continue
			}
			v, err := tomlValue(fv)
			if err != nil {
				return fmt.Errorf("encoding %s: %w", key, err)
			}
			fmt.Fprintf(&b, "%s = %s  # %s\n", name, v, src.File(key))
		}
		for _, j := range tables {
			name := tomlName(sv.Type().Field(j))
			key := section + "." + name
			fv := sv.Field(j)
			fmt.Fprintf(&b, "# %s: %s\n", key, src.File(key))
			for e := 0; e < fv.Len(); e++ {
				el := fv.Index(e)
				fmt.Fprintf(&b, "[[%s]]\n", key)
				for f := 0; f < el.NumField(); f++ {
					if omitEmpty(el.Type().Field(f)) && el.Field(f).IsZero() {
						continue // an alternative spelling left unset
					}
					v, err := tomlValue(el.Field(f))
					if err != nil {
						return fmt.Errorf("encoding %s[%d]: %w", key, e, err)
					}
					fmt.Fprintf(&b, "%s = %s\n", tomlName(el.Type().Field(f)), v)
				}
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// omitEmpty says whether f's toml tag has ",omitempty".
func omitEmpty(f reflect.StructField) bool {
	_, opts, _ := strings.Cut(f.Tag.Get("toml"), ",")
	return slices.Contains(strings.Split(opts, ","), "omitempty")
}

func isTableArray(v reflect.Value) bool {
	return v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct
}

// tomlValue formats one value as a TOML literal; the toml package does the
// quoting so that any string round-trips.
func tomlValue(v reflect.Value) (string, error) {
	var x any
	switch t := v.Interface().(type) {
	case Duration:
		x = t.String()
	case MemorySize:
		x = t.String()
	case Bandwidth:
		x = t.String()
	case Wariness:
		if t < 0 {
			x = t.String()
		} else {
			x = float64(t)
		}
	case IOCostMode:
		if t == IOCostWithModel || t == IOCostAuto {
			x = t.String()
		} else {
			x = t == IOCostOn
		}
	case EtcdIOWeight:
		if t == EtcdIOWeightAuto {
			x = "auto"
		} else {
			x = uint64(t)
		}
	case CPUWeight:
		if t == CPUWeightIdle {
			x = "idle"
		} else {
			x = uint64(t)
		}
	default:
		if v.Kind() == reflect.Slice && v.Len() == 0 { // nil would be left out
			return "[]", nil
		}
		x = t
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(map[string]any{"v": x}); err != nil {
		return "", err
	}
	s, ok := strings.CutPrefix(strings.TrimSpace(buf.String()), "v = ")
	if !ok {
		return "", fmt.Errorf("cannot encode %T", x)
	}
	return s, nil
}

// sortedMap iterates a map in key order, for stable output.
func sortedMap(m map[string]string) func(func(string, string) bool) {
	return func(yield func(string, string) bool) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}
