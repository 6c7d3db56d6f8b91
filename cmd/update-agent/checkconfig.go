package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/etcdmember"
)

// runCheckConfig prints the merged configuration with the file each value
// came from, or every problem found; exit 78 when the config is bad. With
// FILE, a fragment not installed yet is checked where it would go.
func runCheckConfig(env *cmdEnv, args []string) error {
	fs := newFlags(env, "check-config")
	root := fs.String("root", "/", "prefix for the configuration directories (tests, images)")
	alone := fs.Bool("alone", false, "with FILE: merge it over the defaults only, not over the installed fragments")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "Usage: update-agent check-config [options] [FILE]")
		fmt.Fprintln(w, "\nFILE, a fragment not installed yet, is checked as if it were in /etc/update-agent/config.d")
		fmt.Fprintln(w, "(replacing one of its name), merged with the defaults and the installed fragments, or with")
		fmt.Fprintln(w, "the defaults only (--alone).")
		fmt.Fprintln(w, "\nOptions:")
		fs.PrintDefaults()
		fmt.Fprintln(w, "\nExamples:")
		for _, e := range examples["check-config"] {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	var cfg *config.Config
	var src *config.Sources
	var err error
	switch {
	case fs.NArg() > 1:
		return usageError{fmt.Sprintf("check-config: expected at most one FILE, got %q", fs.Args())}
	case fs.NArg() == 1:
		cfg, src, err = config.LoadFragment(*root, fs.Arg(0), *alone)
		if cfg == nil {
			fmt.Fprintf(env.stderr, "error: %v\n", err)
			return configError{errors.New("configuration is invalid: 1 error(s)")}
		}
		with := "the defaults and the installed fragments"
		if *alone {
			with = "the defaults only"
		}
		fmt.Fprintf(env.stderr, "checking %s as if installed in /etc/update-agent/config.d, merged with %s\n", fs.Arg(0), with)
	case *alone:
		return usageError{"check-config: --alone needs a FILE"}
	default:
		cfg, src, err = config.Load(*root)
	}
	if err == nil {
		err = cfg.CheckDaemon() // the daemon's own rules: it reads the same files
	}
	if err == nil && !cfg.Lock.Enabled {
		err = lockOffHere(cfg, *root)
	}
	for _, w := range src.Warnings {
		fmt.Fprintf(env.stderr, "warning: %s\n", w)
	}
	for _, d := range src.Derived {
		fmt.Fprintf(env.stderr, "default from the host: %s\n", d)
	}
	if err != nil {
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		for _, e := range errs {
			fmt.Fprintf(env.stderr, "error: %v\n", e)
		}
		return configError{fmt.Errorf("configuration is invalid: %d error(s)", len(errs))}
	}
	if err := config.Encode(env.stdout, cfg, src); err != nil {
		return fmt.Errorf("printing the configuration: %w", err)
	}
	return nil
}

// lockOffHere refuses lock.enabled = false, as the daemon does, when this
// host shows an etcd member (or cannot be read). check-config stays
// offline: the cluster is not asked (the daemon and doctor ask it). A tree
// under --root other than / is an image, not this host: only its own
// /proc (a test's) is read.
func lockOffHere(cfg *config.Config, root string) error {
	p := procRoot(root)
	if p == "/proc" && rooted(root, "/proc") != "/proc" {
		return nil
	}
	if v, why := etcdmember.JudgeLockOff(etcdmember.LookSigns(context.Background(), p, nil, nil)); v != etcdmember.LockOffWorker {
		return cfg.LockOffRefused(why)
	}
	return nil
}

// loadConfig loads the configuration for a subcommand; a bad one becomes a
// configError (exit 78).
func loadConfig(root string) (*config.Config, *config.Sources, error) {
	cfg, src, err := config.Load(root)
	if err != nil {
		return nil, src, configError{errors.Join(errors.New("bad configuration"), err)}
	}
	return cfg, src, nil
}
