package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/update-agent/update-agent/agent/config"
	"github.com/update-agent/update-agent/agent/etcdclient"
	"github.com/update-agent/update-agent/agent/fleetlock"
	"github.com/update-agent/update-agent/agent/lock"
)

// lockTimeout bounds an operator's lock command: etcd answers in
// milliseconds or is not reachable.
const lockTimeout = 10 * time.Second

// runLock is `update-agent lock status|release`: the operator's view of the
// reboot semaphore and override for a node that will not come back.
func runLock(env *cmdEnv, args []string) error {
	if len(args) == 0 {
		return usageError{"lock: expected 'status' or 'release <node>'"}
	}
	if isHelp(args[0]) {
		printVerbs(env.stdout, "lock")
		return nil
	}
	switch args[0] {
	case "status":
		return runLockStatus(env, args[1:])
	case "release":
		return runLockRelease(env, args[1:])
	}
	return usageError{fmt.Sprintf("lock: unknown action %q (want status or release)", args[0])}
}

// etcdClientOptions maps the [etcd] configuration to client options, paths
// under --root.
func etcdClientOptions(c *config.Config, root string) etcdclient.Options {
	return etcdclient.Options{
		Endpoints: c.Etcd.Endpoints,
		CAFile:    rooted(root, c.Etcd.CAFile), CertFile: rooted(root, c.Etcd.CertFile), KeyFile: rooted(root, c.Etcd.KeyFile),
		Username: c.Etcd.Username, PasswordFile: rooted(root, c.Etcd.PasswordFile),
		DialTimeout: c.Etcd.DialTimeout.D(),
	}
}

func runLockStatus(env *cmdEnv, args []string) error {
	fs := newFlags(env, "lock status")
	root := fs.String("root", "/", "prefix for every configuration path (tests)")
	group := fs.String("group", "", "show only this group (default: every group)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, _, err := loadConfig(*root)
	if err != nil {
		return err
	}
	cli, err := etcdclient.New(etcdClientOptions(cfg, *root))
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	now := time.Now()
	groups, err := lock.Status(ctx, cli, cfg.Lock.KeyPrefix, cfg.Lock.Slots, *group, now)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		if groups == nil {
			groups = []lock.GroupStatus{}
		}
		return enc.Encode(groups)
	}
	printLockStatus(env.stdout, cfg.Lock.KeyPrefix, *group, groups, cfg.Lock.Group, cfg.Lock.Slots)
	return nil
}

// printLockStatus prints groups; localGroup and localSlots are this host's
// lock.group and lock.slots, which the group's recorded count is held to.
func printLockStatus(w io.Writer, prefix, group string, groups []lock.GroupStatus, localGroup string, localSlots int) {
	if len(groups) == 0 {
		where := prefix
		if group != "" {
			where += "/" + group
		}
		fmt.Fprintf(w, "no reboot slots held or awaited under %s\n", where)
		return
	}
	for i, g := range groups {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "group %s: %d of %d slot(s) held, %d waiting\n", g.Group, len(g.Holders), g.Slots, len(g.Waiters))
		if g.SlotsBy == "" && g.Group != lock.MembersGroup {
			// Older agents do not record their count: this host's may not
			// be the group's.
			fmt.Fprintf(w, "  (slot count not recorded in etcd by the group's agents or FleetLock servers: this host's lock.slots)\n")
		}
		if why := lock.SlotsDisagreement(g, localSlots); why != "" && g.Group == localGroup {
			fmt.Fprintf(w, "  WARNING: %s\n", why)
		}
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
		for _, h := range g.Holders {
			fmt.Fprintf(tw, "  holder\t%s\ttarget %s\theld %s\tlease %s left\tboot %s\n",
				entryName(h), shortTarget(h.Target), dur(h.Age), dur(h.TTLLeft), h.BootID)
		}
		for n, h := range g.Waiters {
			fmt.Fprintf(tw, "  waiter %d\t%s\ttarget %s\twaiting %s\tlease %s left\tboot %s\n",
				n+1, entryName(h), shortTarget(h.Target), dur(h.Age), dur(h.TTLLeft), h.BootID)
		}
		tw.Flush()
		if len(g.Pending) > 0 {
			var p []string
			for _, a := range g.Pending {
				p = append(p, fmt.Sprintf("%s (%s)", a.Node, shortTarget(a.Target)))
			}
			fmt.Fprintf(w, "  updates pending: %s\n", strings.Join(p, ", "))
		}
		if sp := g.Spacing; sp != nil {
			fmt.Fprintf(w, "  spacing: %s released last; the next reboot in the group waits %s more (lock.min_interval)\n", sp.By, dur(sp.Left))
		}
	}
}

// entryName marks FleetLock clients (zincati nodes served by `fleetlock
// serve` or the daemon) with the address (and certificate) their entry is
// bound to: a worker back on another address is refused, and the operator
// releases it by the name, which is what `lock release` takes.
func entryName(e lock.EntryStatus) string {
	if e.Kind != lock.KindFleetLock {
		return e.Node
	}
	s := e.Node + " (FleetLock client)"
	if c := e.Client; c != nil && c.Addr != "" {
		s += " from " + c.Addr
	}
	if c := e.Client; c != nil && c.Cert != "" {
		s += " cert " + c.Cert
	}
	return s
}

func shortTarget(checksum string) string {
	if checksum == "" {
		return "-"
	}
	return short(checksum)
}

func dur(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return d.Round(time.Second).String()
}

func runLockRelease(env *cmdEnv, args []string) error {
	fs := newFlags(env, "lock release")
	root := fs.String("root", "/", "prefix for every configuration path (tests)")
	group := fs.String("group", "", "the node's group (default: lock.group from the configuration)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: update-agent lock release [--root DIR] [--group G] <node | fleetlock:<id>>")
		fmt.Fprintln(fs.Output(), "Frees the node's reboot slot (and its place in line) now, without waiting for its lease to expire.")
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\nExamples:")
		for _, e := range examples["lock release"] {
			fmt.Fprintf(fs.Output(), "  %s\n", e)
		}
	}
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 1 {
		return usageError{"lock release: expected exactly one node name"}
	}
	node := fs.Arg(0)
	if err := checkHolderName(node); err != nil {
		return usageError{"lock release: " + err.Error()}
	}
	if *group != "" && !config.ValidName(*group) {
		return usageError{fmt.Sprintf("lock release: --group %q is not a valid name (letters, digits, '.', '-')", *group)}
	}
	cfg, _, err := loadConfig(*root)
	if err != nil {
		return err
	}
	if *group == "" {
		*group = cfg.Lock.Group
	}
	cli, err := etcdclient.New(etcdClientOptions(cfg, *root))
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	found, err := lock.ReleaseNode(ctx, cli, cfg.Lock.KeyPrefix, *group, node)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("node %s holds no reboot slot and is not waiting in group %s", node, *group)
	}
	fmt.Fprintf(env.stdout, "released %s in group %s\n", node, *group)
	return nil
}

// checkHolderName accepts a queue entry's name as `lock status` prints it:
// an agent's node name, or fleetlock:<id> for a FleetLock client.
func checkHolderName(node string) error {
	if id, ok := lock.FleetLockID(node); ok {
		if err := fleetlock.CheckID(id); err != nil {
			return fmt.Errorf("FleetLock client %q: id %w", node, err)
		}
		return nil
	}
	if !config.ValidName(node) {
		return fmt.Errorf("node name %q is not a valid name (letters, digits, '.', '-'; fleetlock:<id> for a FleetLock client)", node)
	}
	return nil
}

// flagError maps a flag parsing error like parseFlags does.
func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError{err.Error()}
}
