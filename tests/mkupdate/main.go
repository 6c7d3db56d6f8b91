// Command mkupdate makes synthetic OS update commits in an ostree repo: a
// tree of a chosen size and file count with a realistic size mix, fully
// determined by a seed, where each generation rewrites a fraction of the
// files (as an OS update rewrites changed binaries).
//
//	mkupdate -repo /srv/updates -ref os/stable -size 1.2GiB -files 10000 -generation 1
//
// prints the new commit's checksum. With -workdir the tree is kept between
// runs and only the files that changed are rewritten. A host staging
// generation N+1 over N pulls only the changed files' objects: use
// -mutate 1 for an update that rewrites everything. With -base COMMIT the
// update is that commit's tree plus the files (under /usr/share/mkupdate):
// a bootable update of an ostree host.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/update-agent/update-agent/agent/oplog"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mkupdate:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mkupdate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	repo := fs.String("repo", "", "ostree repo to commit into (created in archive mode if missing)")
	ref := fs.String("ref", "os/stable", "branch to commit to")
	version := fs.String("version", "", "version metadata (default 1.<generation>)")
	size := fs.String("size", "8MiB", "total size of the tree (K, M, G, KiB, MiB, GiB suffixes)")
	files := fs.Int("files", 200, "number of files")
	seed := fs.Uint64("seed", 1, "seed of the content")
	gen := fs.Int("generation", 0, "generation to make: each one changes -mutate of the files")
	mutate := fs.Float64("mutate", 0.1, "fraction of files changed per generation")
	workdir := fs.String("workdir", "", "keep the tree here between runs (default: a temporary dir)")
	ostreeBin := fs.String("ostree", "ostree", "ostree binary")
	mode := fs.String("mode", "archive", "mode of a repo created here: archive (as served over HTTP; pulls decompress) or bare-user (faster to make)")
	base := fs.String("base", "", "commit or ref in -repo whose tree the update extends (a bootable update: the booted commit plus the files)")
	verbose := fs.Bool("v", false, "log ostree operations to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *repo == "" || fs.NArg() > 0 {
		return errors.New("usage: mkupdate -repo DIR [-ref REF] [-size 1.2GiB] [-files 10000] [-generation N]")
	}
	n, err := parseSize(*size)
	if err != nil {
		return err
	}
	if *files < 1 || *gen < 0 || *mutate < 0 || *mutate > 1 {
		return errors.New("-files must be >= 1, -generation >= 0, -mutate in [0,1]")
	}
	s := spec{Seed: *seed, Size: n, Files: *files, Mutate: *mutate, Generation: *gen}
	if *version == "" {
		*version = "1." + strconv.Itoa(*gen)
	}
	logOut := io.Discard
	if *verbose {
		logOut = stderr
	}
	r := oplog.Runner{Log: slog.New(slog.NewTextHandler(logOut, nil))}
	ctx := context.Background()

	wd := *workdir
	if wd == "" {
		if wd, err = os.MkdirTemp("", "mkupdate-"); err != nil {
			return err
		}
		defer os.RemoveAll(wd)
	}
	tree := filepath.Join(wd, "tree")
	if err := writeTree(s, tree, filepath.Join(wd, "state.json")); err != nil {
		return fmt.Errorf("writing tree: %w", err)
	}
	if _, err := os.Stat(filepath.Join(*repo, "config")); err != nil {
		if _, err := r.Run(ctx, "creating repo", *ostreeBin, "init", "--repo="+*repo, "--mode="+*mode); err != nil {
			return err
		}
	}
	res, err := r.Run(ctx, "committing", append([]string{*ostreeBin}, commitArgs(*repo, *ref, *version, *base, tree)...)...)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, strings.TrimSpace(string(res.Stdout)))
	return nil
}

// commitArgs commits tree to ref, over base's tree if set (the files are
// under /usr/share/mkupdate, so base's tree keeps everything else).
func commitArgs(repo, ref, version, base, tree string) []string {
	args := []string{"commit", "--repo=" + repo, "--branch=" + ref}
	if base != "" {
		args = append(args, "--tree=ref="+base)
	}
	return append(args, "--tree=dir="+tree, "--add-metadata-string=version="+version, "--subject=mkupdate "+version,
		"--owner-uid=0", "--owner-gid=0", "--no-xattrs",
		// The update repo stands in for a server: its durability does not
		// matter, and its fsyncs would only add noise to benchmarks.
		"--fsync=false")
}

// writeTree brings tree to generation s.Generation, rewriting only the files
// whose content differs from what the state file says is there.
func writeTree(s spec, tree, stateFile string) error {
	var old *spec
	if b, err := os.ReadFile(stateFile); err == nil {
		var o spec
		if json.Unmarshal(b, &o) == nil {
			old = &o
		}
	}
	same := old != nil && old.Seed == s.Seed && old.Size == s.Size && old.Files == s.Files && old.Mutate == s.Mutate
	if !same {
		if err := os.RemoveAll(tree); err != nil {
			return err
		}
	}
	_ = os.Remove(stateFile) // a crash mid-way must not leave a lying state
	for i, size := range s.sizes() {
		want := s.lastChange(i, s.Generation)
		if same && old.lastChange(i, old.Generation) == want {
			continue
		}
		if err := s.writeFile(tree, i, size, want); err != nil {
			return err
		}
	}
	b, _ := json.Marshal(s)
	return os.WriteFile(stateFile, b, 0o644)
}

// parseSize reads "1.2GiB", "500M", "4096".
func parseSize(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(v, u.suffix); ok {
			f, err := strconv.ParseFloat(num, 64)
			if err != nil || f <= 0 {
				return 0, fmt.Errorf("bad size %q", v)
			}
			return int64(f * u.mult), nil
		}
	}
	return 0, fmt.Errorf("bad size %q", v)
}
