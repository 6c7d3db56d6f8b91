package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// DefaultSource is the source recorded for a key no fragment set.
const DefaultSource = "default"

// Paths returns the fragment directories under root, lowest precedence
// first: /usr/lib (the package), /run (runtime), /etc (the operator).
func Paths(root string) []string {
	if root == "" {
		root = "/"
	}
	return []string{
		filepath.Join(root, "/usr/lib/update-agent/config.d"),
		filepath.Join(root, "/run/update-agent/config.d"),
		filepath.Join(root, "/etc/update-agent/config.d"),
	}
}

// Sources records where the merged configuration came from.
type Sources struct {
	// Keys maps every key path ("lock.slots") to the fragment that set it
	// last, or DefaultSource.
	Keys map[string]string
	// Fragments are the files merged, in merge order.
	Fragments []string
	// Masked are fragments masked by a symlink to /dev/null.
	Masked []string
	// Overridden maps a fragment to the same-named one in a higher
	// directory that replaced it.
	Overridden map[string]string
	// Warnings are problems that do not stop the agent (a file that is not
	// *.toml, windows set while the strategy ignores them).
	Warnings []string
	// Derived says which defaults were taken from the host rather than
	// built in, and from which file (zincati's update graph): the daemon
	// logs it, check-config prints it.
	Derived []string
}

// File returns the source of a key path; element paths such as
// "reboot.hooks[1].argv" resolve to their array ("reboot.hooks").
func (s *Sources) File(key string) string {
	if s == nil {
		return DefaultSource
	}
	for k := key; k != ""; {
		if f, ok := s.Keys[k]; ok {
			return f
		}
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return DefaultSource
}

// FieldError is one problem with one key. File is empty for values that
// did not come from a file.
type FieldError struct {
	File string
	Key  string
	Msg  string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File != "" && e.File != DefaultSource {
		b.WriteString(e.File + ": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads every fragment under root (see Paths), merges them over
// Default in file-name order and validates the result. The returned error
// joins every problem found (each a *FieldError naming file and key); the
// Config and Sources are returned even then, for diagnostics.
func Load(root string) (*Config, *Sources, error) {
	return load(root, "", false)
}

// LoadFragment is Load with file, a fragment not installed yet, taken as
// if it were in /etc/update-agent/config.d under its own name (replacing an
// installed one of that name). alone leaves out the installed fragments:
// file is merged over the defaults only.
func LoadFragment(root, file string, alone bool) (*Config, *Sources, error) {
	if !strings.HasSuffix(file, ".toml") {
		return nil, nil, &FieldError{File: file, Msg: "would be ignored when installed: only *.toml files are read"}
	}
	return load(root, file, alone)
}

func load(root, extra string, alone bool) (*Config, *Sources, error) {
	if root == "" {
		root = "/"
	}
	cfg := Default()
	src := &Sources{Keys: map[string]string{}, Overridden: map[string]string{}}
	all := leaves()
	for _, l := range all {
		src.Keys[l.path] = DefaultSource
	}
	var files []string
	var errs []error
	if !alone {
		files, errs = discover(root, src)
	}
	if extra != "" {
		files = withFragment(files, extra, src)
	}
	for _, file := range files {
		errs = append(errs, mergeFragment(cfg, src, all, file)...)
	}
	errs = append(errs, zincatiDefaults(cfg, src, root)...)
	cfg.src = src
	verrs, warns := cfg.check(root)
	src.Warnings = append(src.Warnings, warns...)
	errs = append(errs, verrs...)
	return cfg, src, errors.Join(errs...)
}

// discover lists the fragments to merge, applying systemd's rules: a name
// in a later directory replaces the same name in an earlier one, a symlink
// to /dev/null masks the name, and merge order is by file name.
func discover(root string, src *Sources) ([]string, []error) {
	return discoverIn(Paths(root), src)
}

// discoverIn is discover over dirs, lowest precedence first (zincati's
// directories follow the same rules).
func discoverIn(dirs []string, src *Sources) ([]string, []error) {
	var errs []error
	winner := map[string]string{}
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, &FieldError{File: dir, Msg: fmt.Sprintf("reading directory: %v", err)})
			continue
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if !strings.HasSuffix(e.Name(), ".toml") {
				src.Warnings = append(src.Warnings, p+": ignored: only *.toml files are read")
				continue
			}
			if e.IsDir() {
				src.Warnings = append(src.Warnings, p+": ignored: a directory")
				continue
			}
			if old, ok := winner[e.Name()]; ok {
				src.Overridden[old] = p
			}
			winner[e.Name()] = p
		}
	}
	names := make([]string, 0, len(winner))
	for n := range winner {
		names = append(names, n)
	}
	slices.Sort(names)
	var files []string
	for _, n := range names {
		p := winner[n]
		if isMask(p) {
			src.Masked = append(src.Masked, p)
			continue
		}
		files = append(files, p)
	}
	return files, errs
}

// withFragment puts extra among files (sorted by name, as discover returns
// them) where the same name installed in /etc would be, replacing one of
// that name.
func withFragment(files []string, extra string, src *Sources) []string {
	name := filepath.Base(extra)
	out := make([]string, 0, len(files)+1)
	for _, f := range files {
		if filepath.Base(f) == name {
			src.Overridden[f] = extra
			continue
		}
		out = append(out, f)
	}
	i, _ := slices.BinarySearchFunc(out, name, func(f, n string) int { return strings.Compare(filepath.Base(f), n) })
	return slices.Insert(out, i, extra)
}

// isMask reports whether p is a symlink to /dev/null (written literally,
// or resolving to the device itself).
func isMask(p string) bool {
	target, err := os.Readlink(p)
	if err != nil {
		return false
	}
	if filepath.Clean(target) == "/dev/null" {
		return true
	}
	st, err1 := os.Stat(p)
	null, err2 := os.Stat("/dev/null")
	return err1 == nil && err2 == nil && os.SameFile(st, null)
}

// mergeFragment decodes one file key by key and copies over only the keys
// the file defines, so a fragment never resets what it does not mention.
// Decoding each key on its own lets one bad value be reported without
// hiding the problems in the rest of the file.
func mergeFragment(cfg *Config, src *Sources, all []leaf, file string) []error {
	data, err := os.ReadFile(file)
	if err != nil {
		return []error{&FieldError{File: file, Msg: fmt.Sprintf("reading: %v", err)}}
	}
	src.Fragments = append(src.Fragments, file)
	var top map[string]toml.Primitive
	md, err := toml.Decode(string(data), &top)
	if err != nil {
		return []error{decodeError(file, err)}
	}
	var errs []error
	unknown := map[string]bool{}
	failed := map[string]bool{}
	sections := map[string]map[string]toml.Primitive{}
	for name, prim := range top {
		if !slices.ContainsFunc(all, func(l leaf) bool { return l.parts[0] == name }) {
			unknown[name] = true
			continue
		}
		var sec map[string]toml.Primitive
		// The toml package decodes a non-table into a map as nothing at
		// all, so check the type first ("" is a table only implied by a
		// header such as [[reboot.windows]]).
		if t := md.Type(name); (t != "Hash" && t != "") || md.PrimitiveDecode(prim, &sec) != nil {
			errs = append(errs, &FieldError{File: file, Key: name, Msg: "must be a table ([" + name + "])"})
			continue
		}
		sections[name] = sec
		for key := range sec {
			if !slices.ContainsFunc(all, func(l leaf) bool { return l.path == name+"."+key }) {
				unknown[name+"."+key] = true
			}
		}
	}
	dst := reflect.ValueOf(cfg).Elem()
	for _, l := range all {
		prim, ok := sections[l.parts[0]][l.parts[1]]
		if !ok {
			continue
		}
		v := reflect.New(dst.FieldByIndex(l.index).Type())
		if err := md.PrimitiveDecode(prim, v.Interface()); err != nil {
			errs = append(errs, decodeError(file, err))
			failed[l.path] = true
			continue
		}
		dst.FieldByIndex(l.index).Set(v.Elem())
		src.Keys[l.path] = file
	}
	// Unknown keys in file order: sections and section keys found above,
	// and keys inside array-of-table elements that were left undecoded.
	undecoded := map[string]bool{}
	for _, k := range md.Undecoded() {
		undecoded[k.String()] = true
	}
	reported := map[string]bool{}
	for _, k := range md.Keys() {
		ks := k.String()
		inElement := false
		if l, ok := leafFor(all, k); ok && len(k) > len(l.parts) {
			inElement = undecoded[ks] && !failed[l.path]
		}
		if (unknown[ks] || inElement) && !reported[ks] {
			reported[ks] = true
			msg := "unknown key" + suggest(k)
			if h := zincatiHint(ks); h != "" {
				msg = "unknown key: " + h
			} else if h := removedHint(ks); h != "" {
				msg = h
			} else if t := md.Type(ks); len(k) == 1 && (t == "Hash" || t == "") {
				// A table is matched against sections, not keys.
				msg = "unknown section" + suggestSection(ks)
			} else if len(k) == 1 {
				msg = "unknown key outside any section" + suggest(k)
			}
			errs = append(errs, &FieldError{File: file, Key: displayKey(all, k), Msg: msg})
		}
	}
	return errs
}

// displayKey writes a key inside an array of tables as "reboot.hooks[].x".
func displayKey(all []leaf, k toml.Key) string {
	if l, ok := leafFor(all, k); ok && len(k) > len(l.parts) {
		return l.path + "[]." + strings.Join(k[len(l.parts):], ".")
	}
	return strings.Join(k, ".")
}

// suggest offers the known key closest to a misspelt one.
func suggest(k toml.Key) string {
	typed := strings.Join(k, ".")
	best, bestD := "", 3
	for _, p := range KeyPaths() {
		p = strings.ReplaceAll(p, "[]", "")
		d := editDistance(typed, p)
		if len(k) == 1 { // a key outside its section: compare its name
			d = editDistance(typed, p[strings.LastIndex(p, ".")+1:])
		}
		if d < bestD {
			best, bestD = p, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// The toml package's type errors are plain errors of this shape.
var tomlErrRe = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "([^"]*)"\): (.*)$`)

// decodeError rewrites the toml package's errors as "file: key: msg (line N)".
func decodeError(file string, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return &FieldError{File: file, Key: pe.LastKey, Msg: fmt.Sprintf("%s (line %d)", pe.Message, pe.Position.Line)}
	}
	if m := tomlErrRe.FindStringSubmatch(err.Error()); m != nil {
		msg := plainTypeError(m[3])
		if m[1] != "" {
			msg += " (line " + m[1] + ")"
		}
		return &FieldError{File: file, Key: m[2], Msg: msg}
	}
	return &FieldError{File: file, Msg: err.Error()}
}
