package main

import (
	"errors"
	"fmt"

	"github.com/update-agent/update-agent/agent/config"
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

// loadConfig loads the configuration for a subcommand; a bad one becomes a
// configError (exit 78).
func loadConfig(root string) (*config.Config, *config.Sources, error) {
	cfg, src, err := config.Load(root)
	if err != nil {
		return nil, src, configError{errors.Join(errors.New("bad configuration"), err)}
	}
	return cfg, src, nil
}
