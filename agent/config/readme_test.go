package config

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestReadmeReference: the README's configuration reference documents
// exactly the keys of Config, each with its real default.
func TestReadmeReference(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Configuration reference\n")
	if !ok {
		t.Fatal(`README.md has no "## Configuration reference" section`)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	documented := map[string]string{} // key -> default cell
	var order []string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 4 {
			t.Errorf("row does not have 4 cells (key, type, default, meaning): %s", line)
			continue
		}
		key := strings.Trim(strings.TrimSpace(cells[0]), "`")
		if _, dup := documented[key]; dup {
			t.Errorf("%s documented twice", key)
		}
		documented[key] = strings.TrimSpace(cells[2])
		order = append(order, key)
	}
	keys := KeyPaths()
	for _, k := range keys {
		if _, ok := documented[k]; !ok {
			t.Errorf("README configuration reference misses %s", k)
		}
	}
	for _, k := range order {
		if !slices.Contains(keys, k) {
			t.Errorf("README documents %s, which is not a configuration key", k)
		}
	}
	// Defaults: the cell shows the TOML value of Default(); element keys
	// of arrays of tables have none ("-").
	def := reflect.ValueOf(Default()).Elem()
	for _, l := range leaves() {
		cell, ok := documented[l.path]
		if !ok {
			continue
		}
		v, err := tomlValue(def.FieldByIndex(l.index))
		if err != nil {
			t.Fatal(err)
		}
		if want := "`" + v + "`"; cell != want {
			t.Errorf("README default of %s is %s, Default() has %s", l.path, cell, want)
		}
	}
	for k, cell := range documented {
		if strings.Contains(k, "[]") && cell != "-" {
			t.Errorf("README default of %s is %s, want -", k, cell)
		}
	}
}
