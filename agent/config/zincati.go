package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/BurntSushi/toml"
)

// On Fedora CoreOS the OS's update graph is configured for zincati, not
// for the agent: [cincinnati] base_url in zincati's TOML fragments
// (coreos/zincati dist/config.d/50-fedora-coreos-cincinnati.toml). The
// stream is no key there: zincati reads it from the booted deployment
// (coreos/zincati src/identity/mod.rs, parse_booted_updates_stream), as
// the graph source does while identity.stream is "" (and fills a
// ${stream} in base_url with it, as zincati does). An agent whose
// configuration does not choose updates.source follows that graph: the
// ref ("origin") skips the graph's barriers and dead ends.

// ZincatiPaths returns zincati's fragment directories under root, lowest
// precedence first. coreos/zincati src/config/mod.rs scans /usr/lib, /run,
// /etc, in that order (its docs/usage/configuration.md lists /etc before
// /run; the code is what runs); a name in a later directory replaces the
// same name in an earlier one, a symlink to /dev/null masks it, and the
// rest merge in file-name order: the agent's own rules (discoverIn).
func ZincatiPaths(root string) []string {
	if root == "" {
		root = "/"
	}
	return []string{
		filepath.Join(root, "/usr/lib/zincati/config.d"),
		filepath.Join(root, "/run/zincati/config.d"),
		filepath.Join(root, "/etc/zincati/config.d"),
	}
}

// ZincatiGraph is the update graph zincati's configuration gives a host,
// and how that zincati asks before it reboots.
type ZincatiGraph struct {
	// BaseURL is zincati's merged [cincinnati] base_url; "" = none.
	BaseURL string
	// File is the fragment that set it.
	File string
	// Strategy is [updates] strategy ("" = unset: zincati's "immediate")
	// and FleetLockURL [updates.fleet_lock] base_url, each with the
	// fragment that set it (coreos/zincati src/config/fragments.rs,
	// UpdateFragment and UpdateFleetLock).
	Strategy, StrategyFile      string
	FleetLockURL, FleetLockFile string
}

// ReadZincati merges zincati's fragments under root as zincati does and
// returns its graph. Every error names the fragment and the key.
func ReadZincati(root string) (ZincatiGraph, error) {
	var g ZincatiGraph
	files, errs := discoverIn(ZincatiPaths(root), &Sources{Overridden: map[string]string{}})
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, &FieldError{File: f, Msg: fmt.Sprintf("reading: %v", err)})
			continue
		}
		// Only [cincinnati] base_url and how zincati asks before a reboot
		// are read: zincati's other keys are zincati's business (its
		// [identity] keys are the agent's own [identity], set there when
		// wanted).
		var frag struct {
			Cincinnati struct {
				BaseURL *string `toml:"base_url"`
			} `toml:"cincinnati"`
			Updates struct {
				Strategy  *string `toml:"strategy"`
				FleetLock struct {
					BaseURL *string `toml:"base_url"`
				} `toml:"fleet_lock"`
			} `toml:"updates"`
		}
		if _, err := toml.Decode(string(data), &frag); err != nil {
			errs = append(errs, decodeError(f, err))
			continue
		}
		if u := frag.Cincinnati.BaseURL; u != nil {
			g.BaseURL, g.File = *u, f
		}
		if s := frag.Updates.Strategy; s != nil {
			g.Strategy, g.StrategyFile = *s, f
		}
		if u := frag.Updates.FleetLock.BaseURL; u != nil {
			g.FleetLockURL, g.FleetLockFile = *u, f
		}
	}
	return g, errors.Join(errs...)
}

// zincatiDefaults makes zincati's update graph the source when no
// fragment sets updates.source and zincati's configuration under root has
// a base_url; src records the zincati fragment as the source of the keys
// it gave, and Derived says so.
func zincatiDefaults(cfg *Config, src *Sources, root string) []error {
	if src.Keys["updates.source"] != DefaultSource {
		return nil
	}
	g, err := ReadZincati(root)
	if err != nil {
		var out []error
		for _, e := range joined(err) {
			var fe *FieldError
			if errors.As(e, &fe) {
				// Say why the agent reads zincati's files at all, and the way out.
				e = &FieldError{File: fe.File, Key: fe.Key, Msg: fe.Msg +
					" (zincati's configuration is read for the update graph because updates.source is not set; set it to choose the source yourself)"}
			}
			out = append(out, e)
		}
		return out
	}
	if g.BaseURL == "" {
		return nil
	}
	if cfg.Updates.Backend == BackendBootc {
		// bootc follows the booted image's tag only (updates.backend's rule).
		src.Derived = append(src.Derived, fmt.Sprintf("zincati's update graph (%s: cincinnati.base_url %q) not followed: updates.backend = %q (set in %s) follows the origin",
			g.File, g.BaseURL, BackendBootc, src.File("updates.backend")))
		return nil
	}
	cfg.Updates.Source = SourceGraph
	src.Keys["updates.source"] = g.File
	base := fmt.Sprintf("cincinnati.base_url %q (set in %s) kept", cfg.Cincinnati.BaseURL, src.File("cincinnati.base_url"))
	if cfg.Cincinnati.BaseURL == "" {
		cfg.Cincinnati.BaseURL = g.BaseURL
		src.Keys["cincinnati.base_url"] = g.File
		base = fmt.Sprintf("cincinnati.base_url %q", g.BaseURL)
	}
	stream := "the stream from the booted commit's metadata"
	if cfg.Identity.Stream != "" {
		stream = fmt.Sprintf("identity.stream %q", cfg.Identity.Stream)
	}
	src.Derived = append(src.Derived, fmt.Sprintf(`updates.source = "graph" (not set by any fragment) from zincati's configuration %s: %s, %s`,
		g.File, base, stream))
	return nil
}

// joined splits an errors.Join result.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
