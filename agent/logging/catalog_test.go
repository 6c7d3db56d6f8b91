package logging

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	catalogFile = "../../units/update-agent.catalog"
	repoRoot    = "../.."
	docdir      = "/usr/share/doc/update-agent/"
)

// codeIDs reads the ID* constants of msgid.go: name -> value.
func codeIDs(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "msgid.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "ID") {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("%s is not a string literal", n.Name)
				}
				v, _ := strconv.Unquote(lit.Value)
				ids[n.Name] = v
			}
		}
	}
	if len(ids) == 0 {
		t.Fatal("no ID* constants in msgid.go")
	}
	return ids
}

// Every MessageID(...) in the agent's code names one of msgid.go's
// constants, so that codeIDs is every ID the agent can log.
func TestMessageIDsOnlyFromConstants(t *testing.T) {
	ids := codeIDs(t)
	n := 0
	for _, dir := range []string{"agent", "cmd"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(x ast.Node) bool {
				call, ok := x.(*ast.CallExpr)
				if !ok || len(call.Args) != 1 {
					return true
				}
				var fn string
				switch f := call.Fun.(type) {
				case *ast.Ident:
					fn = f.Name
				case *ast.SelectorExpr:
					fn = f.Sel.Name
				}
				if fn != "MessageID" {
					return true
				}
				n++
				var arg string
				switch a := call.Args[0].(type) {
				case *ast.Ident:
					arg = a.Name
				case *ast.SelectorExpr:
					arg = a.Sel.Name
				}
				// record.go logs transitionMessageID's result, which
				// engine/msgid.go picks from these constants.
				fromTransition := arg == "id" && filepath.Base(p) == "record.go"
				if _, ok := ids[arg]; !ok && !fromTransition {
					t.Errorf("%s: MessageID(%s): use a constant of agent/logging/msgid.go", p, arg)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		t.Fatal("found no MessageID(...) call: the scan is broken")
	}
}

// The IDs look like `systemd-id128 new`'s: 32 lower-case hex digits, a
// version 4 UUID (sd_id128_randomize sets those bits), and no pattern an
// author typed by hand (runs like "a1b2c3d4" or "9a8b7c6d"), which another
// program's hand-typed ID could equal.
func TestMessageIDsAreRandom(t *testing.T) {
	seen := map[string]string{}
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for name, id := range codeIDs(t) {
		if other, ok := seen[id]; ok {
			t.Errorf("%s and %s share %s", name, other, id)
		}
		seen[id] = name
		if !hex32.MatchString(id) {
			t.Errorf("%s = %q: want 32 lower-case hex digits", name, id)
			continue
		}
		if id[12] != '4' || !strings.ContainsRune("89ab", rune(id[16])) {
			t.Errorf("%s = %s: not a version 4 UUID as systemd-id128 new makes", name, id)
		}
		if run := longestStep(id); run >= 4 {
			t.Errorf("%s = %s: a run of %d digits counting up or down; make a new one (systemd-id128 new)", name, id, run)
		}
	}
}

// longestStep is the longest run of steps of +1 (or of -1, mod 16) from
// each digit to the one k further (k of 1 or 2: "a1b2c3d4" counts up with
// k = 2). In 32 random digits a run of 4 steps has a chance of about 0.2 %.
func longestStep(id string) int {
	d := func(i int) int { v, _ := strconv.ParseUint(id[i:i+1], 16, 8); return int(v) }
	best := 0
	for _, k := range []int{1, 2} {
		for _, step := range []int{1, 15} { // +1, -1 mod 16
			for start := 0; start < k; start++ {
				run := 0
				for i := start; i+k < len(id); i += k {
					if (d(i)+step)%16 == d(i+k) {
						run++
						best = max(best, run)
					} else {
						run = 0
					}
				}
			}
		}
	}
	return best
}

func TestLongestStepFindsPatterns(t *testing.T) {
	for id, want := range map[string]bool{
		"7a1b2c3d4e5f40718293a4b5c6d7e863": true,  // interleaved counting (an old ID)
		"9c8d7e6f5a4b43c2d1e0f9a8b7c6d574": true,  // counting down in pairs
		"0123456789abcdef0123456789abcdef": true,  // plainly sequential
		"e43996e837064e88b830a27880ebdd39": false, // od -An -tx1 -N16 /dev/urandom
	} {
		if got := longestStep(id) >= 4; got != want {
			t.Errorf("longestStep(%s) = %d, patterned = %v, want %v", id, longestStep(id), got, want)
		}
	}
}

// catalogEntry is one "-- ID" entry of a journal catalog file.
type catalogEntry struct {
	id, lang string
	line     int
	headers  [][2]string // in order; Documentation may repeat
	body     []string    // the prose after the headers' empty line
}

// parseCatalog reads a catalog source file with the rules of systemd's
// catalog_import_file() (src/libsystemd/sd-journal/catalog.c) and its
// documented format (systemd's docs/CATALOG.md, "Journal Message
// Catalogs", https://systemd.io/CATALOG/): "#" (and ";") lines are
// comments; an entry starts, after an empty line or at the top, with
// "-- " and a 32-digit lower-case hex ID, optionally a space and a
// locale; text before any ID and an entry without text are errors (what
// `journalctl --update-catalog` refuses). Then, stricter than systemd:
// RFC822-style headers without continuation lines, one empty line, prose.
func parseCatalog(text string) ([]catalogEntry, []string) {
	var es []catalogEntry
	var errs []string
	sep := regexp.MustCompile(`^-- ([0-9a-f]{32})(?: (\S+))?$`)
	header := regexp.MustCompile(`^([A-Za-z][A-Za-z-]*): (\S.*)$`)
	emptyLine, inBody := true, false
	for i, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		n := i + 1
		switch {
		case line == "":
			emptyLine = true
			if len(es) > 0 {
				e := &es[len(es)-1]
				if !inBody && len(e.headers) == 0 {
					errs = append(errs, "line "+strconv.Itoa(n)+": an empty line before any header")
				}
				inBody = true
				if len(e.body) > 0 && e.body[len(e.body)-1] != "" {
					e.body = append(e.body, "")
				}
			}
			continue
		case strings.ContainsRune("#;", rune(line[0])):
			continue
		}
		if strings.HasPrefix(line, "-- ") {
			m := sep.FindStringSubmatch(line)
			switch {
			case m == nil:
				errs = append(errs, "line "+strconv.Itoa(n)+": separator without a 32-digit lower-case hex ID: "+line)
			case !emptyLine:
				errs = append(errs, "line "+strconv.Itoa(n)+": an entry must follow an empty line")
			default:
				es = append(es, catalogEntry{id: m[1], lang: m[2], line: n})
				emptyLine, inBody = false, false
				continue
			}
		}
		emptyLine = false
		if len(es) == 0 {
			errs = append(errs, "line "+strconv.Itoa(n)+": text before any entry")
			continue
		}
		e := &es[len(es)-1]
		if !inBody {
			m := header.FindStringSubmatch(line)
			if m == nil {
				errs = append(errs, "line "+strconv.Itoa(n)+": not a header (no continuation lines): "+line)
				continue
			}
			e.headers = append(e.headers, [2]string{m[1], m[2]})
			continue
		}
		// catalog.md: a 76-column text, for text consoles; URLs may be longer.
		if len([]rune(line)) > 76 && !strings.Contains(line, "://") {
			errs = append(errs, "line "+strconv.Itoa(n)+": over 76 columns")
		}
		e.body = append(e.body, line)
	}
	for _, e := range es {
		if len(e.body) == 0 {
			errs = append(errs, "entry "+e.id+": no text after its headers")
		}
	}
	return es, errs
}

func (e catalogEntry) values(key string) []string {
	var vs []string
	for _, h := range e.headers {
		if h[0] == key {
			vs = append(vs, h[1])
		}
	}
	return vs
}

// installedDoc maps a path under /usr/share/doc/update-agent/ to the
// repository file the spec's %doc lines install there.
func installedDoc(p string) string {
	switch {
	case p == "FLOW.md":
		return "agent/engine/FLOW.md"
	case strings.HasPrefix(p, "examples/"):
		return "packaging/examples/" + strings.TrimPrefix(p, "examples/")
	}
	return p // README.md, docs/...
}

func TestCatalog(t *testing.T) {
	data, err := os.ReadFile(catalogFile)
	if err != nil {
		t.Fatal(err)
	}
	es, errs := parseCatalog(string(data))
	for _, e := range errs {
		t.Errorf("%s: %s", catalogFile, e)
	}
	ids := codeIDs(t)
	byID := map[string][]catalogEntry{}
	for _, e := range es {
		byID[e.id] = append(byID[e.id], e)
	}
	for name, id := range ids {
		switch n := len(byID[id]); n {
		case 1:
		case 0:
			t.Errorf("%s (%s) has no catalog entry", name, id)
		default:
			t.Errorf("%s (%s) has %d catalog entries, want one", name, id, n)
		}
	}
	for _, e := range es {
		if !slices.Contains(slices.Collect(maps.Values(ids)), e.id) {
			t.Errorf("line %d: entry %s is no ID of msgid.go", e.line, e.id)
		}
		if e.lang != "" {
			t.Errorf("line %d: entry %s has locale %s; translations go in update-agent.LANG.catalog", e.line, e.id, e.lang)
		}
		if s := e.values("Subject"); len(s) != 1 {
			t.Errorf("entry %s: %d Subject headers, want one", e.id, len(s))
		}
		if d := e.values("Defined-By"); !slices.Equal(d, []string{"update-agent"}) {
			t.Errorf("entry %s: Defined-By %q, want update-agent", e.id, d)
		}
		docs := e.values("Documentation")
		if len(docs) == 0 {
			t.Errorf("entry %s: no Documentation", e.id)
		}
		for _, d := range docs {
			if !strings.HasPrefix(d, "file://") {
				continue
			}
			p, ok := strings.CutPrefix(strings.TrimPrefix(d, "file://"), docdir)
			if !ok {
				t.Errorf("entry %s: Documentation %s is not under %s", e.id, d, docdir)
				continue
			}
			if _, err := os.Stat(filepath.Join(repoRoot, installedDoc(p))); err != nil {
				t.Errorf("entry %s: Documentation %s: the package installs no such file (%v)", e.id, d, err)
			}
		}
	}
	if len(es) == 0 {
		t.Fatal("no entries")
	}
}

// parseCatalog refuses what systemd refuses.
func TestParseCatalogErrors(t *testing.T) {
	const id = "e43996e837064e88b830a27880ebdd39"
	for name, text := range map[string]string{
		"text before an entry": "Subject: x\n\n-- " + id + "\nSubject: x\n\ntext\n",
		"no text":              "-- " + id + "\nSubject: x\n",
		"upper-case ID":        "-- " + strings.ToUpper(id) + "\nSubject: x\n\ntext\n",
		"short ID":             "-- " + id[:31] + "\nSubject: x\n\ntext\n",
		"continuation line":    "-- " + id + "\nSubject: x\n  more\n\ntext\n",
		"no empty line before": "-- " + id + "\nSubject: x\n\ntext\n-- " + id + "\nSubject: y\n\ntext\n",
	} {
		if _, errs := parseCatalog(text); len(errs) == 0 {
			t.Errorf("%s: accepted", name)
		}
	}
	es, errs := parseCatalog("# comment\n-- " + id + "\nSubject: x\nDocumentation: man:a(8)\nDocumentation: man:b(8)\n\none\n\ntwo\n")
	if len(errs) != 0 || len(es) != 1 || len(es[0].values("Documentation")) != 2 || len(es[0].body) != 3 {
		t.Errorf("a good entry: %+v, %q", es, errs)
	}
}

// journalctl itself compiles the catalog and lists every entry with its
// subject, where it is installed (any systemd host).
func TestCatalogCompilesWithJournalctl(t *testing.T) {
	journalctl, err := exec.LookPath("journalctl")
	if err != nil {
		if os.Getenv("UA_REQUIRE_TOOLS") != "" {
			t.Fatal("journalctl not found on PATH; tests/host-deps.sh installs systemd's package (make test requires it)")
		}
		t.Skip("journalctl not installed")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "usr/lib/systemd/catalog")
	data, err := os.ReadFile(catalogFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "update-agent.catalog"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(journalctl, "--root="+root, "--update-catalog").CombinedOutput(); err != nil {
		t.Fatalf("journalctl --update-catalog: %v\n%s", err, out)
	}
	out, err := exec.Command(journalctl, "--root="+root, "--list-catalog").CombinedOutput()
	if err != nil {
		t.Fatalf("journalctl --list-catalog: %v\n%s", err, out)
	}
	for name, id := range codeIDs(t) {
		if !regexp.MustCompile(`(?m)^` + id + ` update-agent: \S`).Match(out) {
			t.Errorf("%s (%s) not listed with a subject by journalctl --list-catalog:\n%s", name, id, out)
		}
	}
}

// docs/operations.md's table names each ID once; README and docs name no
// other 32-digit ID as a MESSAGE_ID.
func TestDocsNameTheIDs(t *testing.T) {
	ids := codeIDs(t)
	ops, err := os.ReadFile(filepath.Join(repoRoot, "docs/operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, id := range ids {
		if n := strings.Count(string(ops), "| `"+id+"` |"); n != 1 {
			t.Errorf("docs/operations.md's table names %s (%s) %d times, want once", name, id, n)
		}
	}
	known := slices.Collect(maps.Values(ids))
	msgID := regexp.MustCompile(`MESSAGE_ID=([0-9a-fA-F]{32})|\| ` + "`" + `([0-9a-fA-F]{32})` + "`" + ` \|`)
	for _, f := range []string{"README.md", "docs/operations.md"} {
		text, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgID.FindAllStringSubmatch(string(text), -1) {
			if id := m[1] + m[2]; !slices.Contains(known, id) {
				t.Errorf("%s names MESSAGE_ID %s, which the agent does not log", f, id)
			}
		}
	}
}
