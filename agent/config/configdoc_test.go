package config

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// configDoc is the configuration reference, relative to this package; its
// "## Keys" section holds the table the tests read.
const configDoc = "../../docs/configuration.md"

// documentedKeys reads the key table of configDoc: each key with its default
// cell, and the keys in the order written.
func documentedKeys(t *testing.T) (map[string]string, []string) {
	t.Helper()
	data, err := os.ReadFile(configDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Keys\n")
	if !ok {
		t.Fatalf(`%s has no "## Keys" section`, configDoc)
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
	if len(order) == 0 {
		t.Fatalf("%s: no key rows in its Keys section", configDoc)
	}
	return documented, order
}

// TestConfigurationDoc: docs/configuration.md documents exactly the keys of
// Config, each with its real default. With TestDefaultsFileIsDefault (the
// shipped 00-defaults.toml sets exactly those keys, no unknown ones) every
// key an operator reads in the defaults file is documented.
func TestConfigurationDoc(t *testing.T) {
	documented, order := documentedKeys(t)
	keys := KeyPaths()
	for _, k := range keys {
		if _, ok := documented[k]; !ok {
			t.Errorf("docs/configuration.md misses %s", k)
		}
	}
	for _, k := range order {
		if !slices.Contains(keys, k) {
			t.Errorf("docs/configuration.md documents %s, which is not a configuration key", k)
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
			t.Errorf("docs/configuration.md: default of %s is %s, Default() has %s", l.path, cell, want)
		}
	}
	for k, cell := range documented {
		if strings.Contains(k, "[]") && cell != "-" {
			t.Errorf("docs/configuration.md: default of %s is %s, want -", k, cell)
		}
	}
}
