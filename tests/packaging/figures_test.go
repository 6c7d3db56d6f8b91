package packaging

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The staging benchmark's figures are quoted in the README (in an operator's
// words), docs/design.md and the defaults file's comments; docs/benchmarks.md
// is where they are measured. One set everywhere: each README row has the
// benchmark row's medians, and iocost's staging-time range is the same in
// every file that gives it.

// tableRows returns the cells of the first Markdown table after heading,
// keyed by the row's first cell.
func tableRows(t *testing.T, text, heading string) map[string][]string {
	t.Helper()
	i := strings.Index(text, heading)
	if i < 0 {
		t.Fatalf("no %q", heading)
	}
	rows := map[string][]string{}
	in := false
	for _, line := range strings.Split(text[i:], "\n") {
		if !strings.HasPrefix(line, "|") {
			if in {
				break
			}
			continue
		}
		in = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows[cells[0]] = cells[1:]
	}
	return rows
}

var figureRe = regexp.MustCompile(`x([0-9]+(?:\.[0-9]+)?)`)

// figures are the "xN" numbers of a cell, ranges in brackets left out.
func figures(cell string) []string {
	if i := strings.Index(cell, "["); i >= 0 {
		cell = cell[:i]
	}
	var out []string
	for _, m := range figureRe.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestFiguresAgree(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// The README speaks to operators: the harness's words and run IDs stay
	// in docs/benchmarks.md.
	for _, w := range []string{"TCG", "CPU-only", "200MiB-", "x-cpuburn", "(b) naive"} {
		if strings.Contains(read("README.md"), w) {
			t.Errorf("README.md says %q: the benchmark's own terms belong in docs/benchmarks.md", w)
		}
	}
	bench := tableRows(t, read("docs/benchmarks.md"), "### Staging vs etcd latency")
	readme := tableRows(t, read("README.md"), "## Status")
	lo, hi := math.Inf(1), math.Inf(-1)
	found := 0
	for disk, b := range bench {
		if len(b) < 7 || !strings.HasPrefix(disk, "XFS") && !strings.HasPrefix(disk, "ext4") {
			continue
		}
		// benchmarks: CPU-only, naive, loop, iocost, p99 vs naive, staging loop / iocost, CPU.
		want := append(append(append(figures(b[1]), figures(b[2])...), figures(b[3])...), figures(b[5])...)
		st := figures(b[5])
		if len(st) != 2 {
			t.Fatalf("benchmarks.md %s: staging cell %q", disk, b[5])
		}
		v, _ := strconv.ParseFloat(st[1], 64)
		lo, hi = min(lo, v), max(hi, v)
		for rdisk, r := range readme {
			if !strings.HasPrefix(rdisk, disk) {
				continue
			}
			found++
			var got []string
			for _, c := range r {
				got = append(got, figures(c)...)
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("README %q: %v, benchmarks.md: %v", rdisk, got, want)
			}
		}
	}
	if found != len(readme)-2 || found == 0 { // less the header and separator rows
		t.Errorf("README's Status table has %d rows, %d of them benchmarks.md's disks", len(readme)-2, found)
	}
	// Rounded half up, as written by hand (2.55 is 2.6).
	round := func(v float64) float64 { return math.Round(v*10+1e-6) / 10 }
	span := fmt.Sprintf("%.1f-%.1fx", round(lo), round(hi))
	for _, p := range []string{"README.md", "docs/design.md", "docs/benchmarks.md", "packaging/config.d/00-defaults.toml"} {
		if !strings.Contains(read(p), span) {
			t.Errorf("%s does not give iocost's staging time as %s plain staging's (benchmarks.md's table)", p, span)
		}
	}
}
