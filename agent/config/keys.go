package config

import (
	"reflect"
	"strings"
)

// leaf is one settable key: a scalar, a scalar array, or an array of tables
// (which a fragment replaces as a whole).
type leaf struct {
	path  string   // "lock.slots"
	parts []string // ["lock", "slots"]
	index []int    // reflect field index path from Config
}

// leaves walks Config's toml tags. Sections are structs; everything else,
// including slices of structs, is a leaf.
func leaves() []leaf {
	var out []leaf
	var walk func(t reflect.Type, parts []string, index []int)
	walk = func(t reflect.Type, parts []string, index []int) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := tomlName(f)
			if name == "" {
				continue
			}
			p := append(append([]string{}, parts...), name)
			idx := append(append([]int{}, index...), i)
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, p, idx)
				continue
			}
			out = append(out, leaf{path: strings.Join(p, "."), parts: p, index: idx})
		}
	}
	walk(reflect.TypeFor[Config](), nil, nil)
	return out
}

func tomlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// KeyPaths lists every key a fragment may set, in schema order. Keys of
// array-of-table elements are listed as "reboot.hooks[].argv" after their
// array ("reboot.hooks").
func KeyPaths() []string {
	var out []string
	for _, l := range leaves() {
		out = append(out, l.path)
		t := reflect.TypeFor[Config]().FieldByIndex(l.index).Type
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
			for i := 0; i < t.Elem().NumField(); i++ {
				if n := tomlName(t.Elem().Field(i)); n != "" {
					out = append(out, l.path+"[]."+n)
				}
			}
		}
	}
	return out
}

// leafFor maps a key path from a fragment (["reboot","hooks","argv"]) to
// the leaf that contains it, if any.
func leafFor(all []leaf, key []string) (leaf, bool) {
	for _, l := range all {
		if len(key) >= len(l.parts) && equalParts(key[:len(l.parts)], l.parts) {
			return l, true
		}
	}
	return leaf{}, false
}

func equalParts(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
