package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var updateMan = flag.Bool("update", false, "rewrite packaging/update-agent.8 from the -h texts")

const manFile = "../../packaging/update-agent.8"

// The packaged man page is what the -h texts render to: a changed flag or
// example without `-update` fails here, not in an operator's terminal.
func TestManPageIsCurrent(t *testing.T) {
	got := manPage()
	if *updateMan {
		if err := os.WriteFile(manFile, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(manFile)
	if err != nil {
		t.Fatalf("%v (write it with: go test ./cmd/update-agent -run TestManPageIsCurrent -update)", err)
	}
	if string(want) != got {
		t.Errorf("%s is not what the -h texts render to; rewrite it with: go test ./cmd/update-agent -run TestManPageIsCurrent -update", manFile)
	}
	// Every subcommand and verb has its section, with its options and examples.
	for _, c := range commands() {
		if !strings.Contains(got, ".SS "+roff(c.name)+"\n") {
			t.Errorf("no section for %s", c.name)
		}
		for _, v := range verbs[c.name] {
			if !strings.Contains(got, ".B "+roff(c.name+" "+v.name)+"\n") {
				t.Errorf("no entry for %s %s", c.name, v.name)
			}
		}
	}
	for _, want := range []string{`\-root string`, "Examples:", `update\-agent lock release cp2`, ".B 78\n", ".B 79\n", ".B 81\n", ".B 3\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("man page lacks %q", want)
		}
	}
	for i, line := range strings.Split(got, "\n") {
		if strings.Contains(line, "(-h failed") || strings.Contains(line, `(\-h failed`) {
			t.Errorf("line %d: %s", i+1, line)
		}
	}
}
