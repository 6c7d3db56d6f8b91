package packaging

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The documentation is read in two places: the repository (a forge renders
// it) and /usr/share/doc/update-agent on a host, where the spec's %doc
// lines put each file by its base name (README.md, docs/, FLOW.md,
// examples/). A relative link must lead to a file in both, and a #fragment
// to a heading of its target.

// sourceLinkOnly are links that cannot lead anywhere once installed, in
// files this test does not fix: the target is a source-tree file the
// package does not ship.
var sourceLinkOnly = map[string]bool{
	// docs/benchmarks.md is the benchmark report's, edited with its runs.
	"docs/benchmarks.md -> ../tests/bench/results/README.md": true,
}

// docLayout reads the spec's relative %doc lines: installed path (under the
// doc dir) -> repository path, for every file they ship.
func docLayout(t *testing.T, root string) map[string]string {
	t.Helper()
	spec, err := os.ReadFile(filepath.Join(root, "update-agent.spec"))
	if err != nil {
		t.Fatal(err)
	}
	layout := map[string]string{}
	for _, line := range strings.Split(string(spec), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "%doc" {
			continue
		}
		for _, src := range fields[1:] {
			if strings.HasPrefix(src, "/") || strings.HasPrefix(src, "%") {
				continue // installed by %install, not by %doc's copy
			}
			// rpm copies each relative %doc path into the doc dir by its
			// base name (cp -pr).
			base := path.Base(src)
			err := filepath.WalkDir(filepath.Join(root, src), func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(filepath.Join(root, src), p)
				layout[path.Join(base, filepath.ToSlash(rel))] = path.Join(src, filepath.ToSlash(rel))
				return nil
			})
			if err != nil {
				t.Fatalf("%%doc %s: %v", src, err)
			}
		}
	}
	if len(layout) == 0 {
		t.Fatal("update-agent.spec: no files from its doc lines")
	}
	return layout
}

var (
	fence   = regexp.MustCompile("(?ms)^ *```.*?^ *```")
	codeRun = regexp.MustCompile("`[^`\n]*`")
	// [text](target "title"), and reference definitions [label]: target.
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	heading    = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
	notSlug    = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

func links(md string) []string {
	md = fence.ReplaceAllString(md, "")
	md = codeRun.ReplaceAllString(md, "")
	var out []string
	for _, re := range []*regexp.Regexp{inlineLink, refLink} {
		for _, m := range re.FindAllStringSubmatch(md, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// anchors are a markdown file's heading ids as GitHub makes them: lower
// case, punctuation dropped, spaces to hyphens, -1, -2... on repeats.
func anchors(md string) map[string]bool {
	md = fence.ReplaceAllString(md, "")
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(md, -1) {
		text := codeRun.ReplaceAllStringFunc(m[1], func(s string) string { return strings.Trim(s, "`") })
		id := strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
		if n := seen[id]; n > 0 {
			ids[id+"-"+strconv.Itoa(n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

// docSources are the markdown files whose links are read on a host.
func docSources(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md", "agent/engine/FLOW.md"}
	m, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, f := range m {
		files = append(files, "docs/"+filepath.Base(f))
	}
	err := filepath.WalkDir(filepath.Join(root, "packaging/examples"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "README.md" {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

func TestDocLinksResolveInstalledAndInRepo(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	layout := docLayout(t, root)
	installedAs := map[string]string{} // repository path -> installed path
	installedDirs := map[string]bool{}
	for inst, src := range layout {
		installedAs[src] = inst
		for d := path.Dir(inst); d != "."; d = path.Dir(d) {
			installedDirs[d] = true
		}
	}
	n := 0
	for _, src := range docSources(t, root) {
		inst, ok := installedAs[src]
		if !ok {
			t.Errorf("%s: the spec's %%doc lines do not ship it", src)
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(string(data)) {
			if scheme.MatchString(l) {
				continue // a URL: file:///usr/share/doc/... is the catalog's and units' business
			}
			n++
			target, frag, _ := strings.Cut(l, "#")
			if target == "" { // #fragment in the same file
				if !anchors(string(data))[frag] {
					t.Errorf("%s: link %s: no such heading in %s", src, l, src)
				}
				continue
			}
			repoTarget := path.Join(path.Dir(src), target)
			if _, err := os.Stat(filepath.Join(root, repoTarget)); err != nil {
				t.Errorf("%s: link %s: %s is not in the repository", src, l, repoTarget)
				continue
			}
			instTarget := path.Join(path.Dir(inst), target)
			_, isFile := layout[instTarget]
			if !isFile && !installedDirs[strings.TrimSuffix(instTarget, "/")] && !sourceLinkOnly[src+" -> "+target] {
				t.Errorf("%s: link %s: installed as %s/%s, it leads to %s/%s, which the package does not ship",
					src, l, docdir, inst, docdir, instTarget)
			}
			if frag != "" && strings.HasSuffix(target, ".md") {
				tdata, err := os.ReadFile(filepath.Join(root, repoTarget))
				if err != nil {
					t.Fatal(err)
				}
				if !anchors(string(tdata))[frag] {
					t.Errorf("%s: link %s: no heading #%s in %s", src, l, frag, repoTarget)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no relative links found: the link scan is broken")
	}
}

func TestLinkAndAnchorScan(t *testing.T) {
	md := "# Why hasn't this node rebooted yet?\n## zincati workers (FleetLock)\n## `update-agent doctor`\n## Notes\n## Notes\n" +
		"[a](docs/x.md#y) `[b](not/a/link.md)`\n[c]: ../ref.md\n```\n[d](in/a/fence.md)\n```\n[e](<sp.md> \"title\")\n"
	if got, want := links(md), []string{"docs/x.md#y", "sp.md", "../ref.md"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("links = %q, want %q", got, want)
	}
	a := anchors(md)
	for _, id := range []string{"why-hasnt-this-node-rebooted-yet", "zincati-workers-fleetlock", "update-agent-doctor", "notes", "notes-1"} {
		if !a[id] {
			t.Errorf("anchors: no %s in %v", id, a)
		}
	}
}
