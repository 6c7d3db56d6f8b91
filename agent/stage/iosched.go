package stage

import (
	"context"

	"github.com/update-agent/update-agent/agent/iosched"
)

// IOSched adapts agent/iosched to Scheduler.
type IOSched struct {
	Resolver iosched.Resolver
	Options  iosched.Options
}

func (i IOSched) Disks(paths []string) ([]string, error) { return i.Resolver.Disks(paths) }
func (i IOSched) Filesystems(paths []string) ([]iosched.Filesystem, error) {
	return i.Resolver.Filesystems(paths)
}
func (i IOSched) Apply(ctx context.Context, disks []string) error {
	return iosched.Apply(ctx, i.Options, disks)
}
func (i IOSched) Restore() error { return iosched.Restore(i.Options) }
