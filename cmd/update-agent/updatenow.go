package main

import (
	"context"
	"fmt"
	"time"

	"github.com/update-agent/update-agent/agent/control"
)

func runUpdateNow(env *cmdEnv, args []string) error {
	fs := newFlags(env, "update-now")
	root := fs.String("root", "/", "prefix for the control socket's path (tests)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := (control.Client{Socket: rooted(*root, control.DefaultSocket)}).UpdateNow(ctx); err != nil {
		return err
	}
	fmt.Fprintln(env.stdout, "update-agent: asked the daemon to check for an update and stage it now; reboot windows and the lock still apply. See 'update-agent status'.")
	return nil
}
