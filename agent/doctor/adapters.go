package doctor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/update-agent/update-agent/agent/etcdmember"
	"github.com/update-agent/update-agent/agent/gates"
	"github.com/update-agent/update-agent/agent/iosched"
	"github.com/update-agent/update-agent/agent/lock"
	"github.com/update-agent/update-agent/agent/systemd"
)

// EtcdClient is Etcd over a client and the member adapter.
type EtcdClient struct {
	Cli    *clientv3.Client
	Member *etcdmember.Cluster
	// KeyPrefix is lock.key_prefix: the probe reads under it, as the lock
	// does, so a user without the permission fails here.
	KeyPrefix string
	// CallTimeout bounds each endpoint's status call (default 3s).
	CallTimeout time.Duration
	// TLS is the client's TLS configuration (nil: none), for naming why
	// an endpoint does not answer (endpointCause).
	TLS *tls.Config
}

// Probe asks every endpoint for its status, then reads under the lock's
// prefix (which needs auth accepted when etcd has it on).
func (e EtcdClient) Probe(ctx context.Context) (string, error) {
	t := e.CallTimeout
	if t == 0 {
		t = 3 * time.Second
	}
	var ok, down []string
	var errs []error
	for _, ep := range e.Cli.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, t)
		_, err := e.Cli.Status(sctx, ep)
		cancel()
		if err != nil {
			down = append(down, ep)
			if cause := endpointCause(ctx, ep, e.TLS, t); cause != "" {
				err = errors.New(cause)
			}
			errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			continue
		}
		ok = append(ok, ep)
	}
	if len(ok) == 0 {
		return "", fmt.Errorf("no endpoint accepted a status request: %w", joinLine(errs))
	}
	if _, err := e.Cli.Get(ctx, strings.TrimRight(e.KeyPrefix, "/")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		return "", fmt.Errorf("%s answer(s), but reading under %s failed (TLS client certificate, user or permissions?): %w", strings.Join(ok, ", "), e.KeyPrefix, err)
	}
	where := strings.Join(ok, ", ")
	if len(down) > 0 {
		where += fmt.Sprintf(" (not at %s: %v)", strings.Join(down, ", "), joinLine(errs))
	}
	return where, nil
}

func (e EtcdClient) Members(ctx context.Context) ([]etcdmember.Member, error) {
	return e.Member.Members(ctx)
}

func (e EtcdClient) LocalMatch(ctx context.Context) (etcdmember.Match, error) {
	return e.Member.LocalMatch(ctx)
}

func (e EtcdClient) Health(ctx context.Context) (etcdmember.Health, error) {
	return e.Member.Health(ctx)
}

// Alarms lists the cluster's active alarms as "member: ALARM" (the reboot
// gate's own reading).
func (e EtcdClient) Alarms(ctx context.Context) ([]string, error) {
	alarms, err := gates.Alarms(ctx, e.Cli)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range alarms {
		out = append(out, a.Member+": "+a.Type)
	}
	return out, nil
}

// Rights reads etcd's auth status and tries a harmless admin call (listing
// users): denied means the user lacks the root role.
func (e EtcdClient) Rights(ctx context.Context) (Rights, error) {
	st, err := e.Cli.AuthStatus(ctx)
	if err != nil {
		return Rights{}, fmt.Errorf("reading etcd's auth status: %w", err)
	}
	if !st.Enabled {
		return Rights{}, nil
	}
	_, err = e.Cli.UserList(ctx)
	switch {
	case err == nil:
		return Rights{Auth: true, Admin: true}, nil
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return Rights{Auth: true}, nil
	}
	return Rights{}, fmt.Errorf("asking etcd whether the user is an admin (user list): %w", err)
}

// EtcdLock is Lock over agent/lock.
type EtcdLock struct {
	Cli    *clientv3.Client
	Prefix string
	Group  string
	Slots  int
}

func (l EtcdLock) Status(ctx context.Context) ([]lock.GroupStatus, error) {
	return lock.Status(ctx, l.Cli, l.Prefix, l.Slots, l.Group, time.Now())
}

// SystemdCgroups finds a unit's cgroup through systemd and checks that it
// exists under Root's /sys/fs/cgroup.
type SystemdCgroups struct{ Root string }

func (s SystemdCgroups) UnitCgroup(ctx context.Context, unit string) (string, error) {
	conn, err := systemd.Dial(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	cg, err := conn.ControlGroup(ctx, unit)
	if err != nil {
		return "", err
	}
	if cg == "" {
		return "", fmt.Errorf("systemd has no cgroup for it: is it running?")
	}
	p := filepath.Join(Rooted(s.Root, "/sys/fs/cgroup"), cg)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("its cgroup: %w", err)
	}
	return p, nil
}

// ProcessCgroup finds the cgroup of the processes named comm in Root's
// /proc and checks that it exists under /sys/fs/cgroup.
func (s SystemdCgroups) ProcessCgroup(comm string) (string, error) {
	cg, err := etcdmember.ProcessCgroup(Rooted(s.Root, "/proc"), comm)
	if err != nil {
		return "", err
	}
	p := filepath.Join(Rooted(s.Root, "/sys/fs/cgroup"), cg)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("its cgroup: %w", err)
	}
	return p, nil
}

// SysfsDisks resolves disks with agent/iosched under Root.
type SysfsDisks struct {
	Root string
	// Stat is the device number of the file system holding a (rooted)
	// path; nil uses stat(2). Tests fake it, as a fake sysfs needs.
	Stat func(path string) (major, minor uint32, err error)
}

func (s SysfsDisks) sys() string { return Rooted(s.Root, "/sys") }

func (s SysfsDisks) resolver() iosched.Resolver {
	return iosched.Resolver{SysRoot: s.sys(), Stat: s.Stat, MountInfo: Rooted(s.Root, "/proc/self/mountinfo")}
}

func (s SysfsDisks) rooted(paths []string) []string {
	var out []string
	for _, p := range paths {
		out = append(out, Rooted(s.Root, p))
	}
	return out
}

func (s SysfsDisks) Disks(paths []string) ([]string, error) {
	return s.resolver().Disks(s.rooted(paths))
}

// Filesystems names each file system by the configured path, not the
// rooted one.
func (s SysfsDisks) Filesystems(paths []string) ([]iosched.Filesystem, error) {
	fss, err := s.resolver().Filesystems(s.rooted(paths))
	for i := range fss {
		fss[i].Path = paths[i]
	}
	return fss, err
}

// WholeDisks resolves name through its device number, the way the
// staging paths' devices are resolved.
func (s SysfsDisks) WholeDisks(name string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(s.sys(), "class", "block", name, "dev"))
	if err != nil {
		return nil, fmt.Errorf("no block device %s: %w", name, err)
	}
	var maj, min uint32
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &maj, &min); err != nil {
		return nil, fmt.Errorf("%s: device number %q: %w", name, b, err)
	}
	return s.resolver().DisksOf(maj, min)
}

func (s SysfsDisks) Scheduler(disk string) (string, []string, error) {
	b, err := os.ReadFile(filepath.Join(s.sys(), "block", disk, "queue", "scheduler"))
	if err != nil {
		return "", nil, err
	}
	cur, offered := iosched.ParseScheduler(string(b))
	return cur, offered, nil
}

// HTTPMetrics fetches over HTTP.
type HTTPMetrics struct{ Client *http.Client }

func (h HTTPMetrics) Fetch(ctx context.Context, url string) (io.ReadCloser, error) {
	c := h.Client
	if c == nil {
		c = &http.Client{Timeout: 5 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("%s", resp.Status)
	}
	return resp.Body, nil
}

// Rooted prefixes an absolute host path with root (--root).
func Rooted(root, p string) string {
	if root == "" || root == "/" || p == "" {
		return p
	}
	return filepath.Join(root, p)
}

// joinLine joins errors on one line (errors.Join uses newlines).
func joinLine(errs []error) error {
	var s []string
	for _, e := range errs {
		s = append(s, e.Error())
	}
	return errors.New(strings.Join(s, "; "))
}

// NoEtcd is Etcd when no client could be set up (a bad CA or key file):
// every check that needs etcd fails with Err.
type NoEtcd struct{ Err error }

func (n NoEtcd) Probe(context.Context) (string, error) { return "", n.Err }
func (n NoEtcd) Members(context.Context) ([]etcdmember.Member, error) {
	return nil, n.Err
}
func (n NoEtcd) LocalMatch(context.Context) (etcdmember.Match, error) {
	return etcdmember.Match{}, n.Err
}
func (n NoEtcd) Health(context.Context) (etcdmember.Health, error) {
	return etcdmember.Health{}, n.Err
}
func (n NoEtcd) Alarms(context.Context) ([]string, error) { return nil, n.Err }
func (n NoEtcd) Rights(context.Context) (Rights, error)   { return Rights{}, n.Err }
