package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/etcdmember"
)

// runCheckConfig prints the merged configuration with the file each value
// came from, or every problem found; exit 78 when the config is bad.
func runCheckConfig(env *cmdEnv, args []string) error {
	fs := newFlags(env, "check-config")
	root := fs.String("root", "/", "prefix for the configuration directories (tests, images)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, src, err := config.Load(*root)
	if err == nil {
		err = cfg.CheckDaemon() // the daemon's own rules: it reads the same files
	}
	if err == nil && !cfg.Lock.Enabled {
		err = lockOffHere(cfg, *root)
	}
	for _, w := range src.Warnings {
		fmt.Fprintf(env.stderr, "warning: %s\n", w)
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
