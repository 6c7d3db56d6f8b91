package standin

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/update-agent/update-agent/agent/oplog"
)

// ostreeCLI runs Debian's ostree binary; every call is a logged operation.
type ostreeCLI struct {
	bin    string
	runner oplog.Runner
}

func newOstree(c Config, r oplog.Runner) ostreeCLI {
	// SIGINT lets ostree stop cleanly when a transaction is cancelled.
	r.Interrupt = syscall.SIGINT
	r.WaitDelay = 10 * time.Second
	return ostreeCLI{bin: c.Ostree, runner: r}
}

func (o ostreeCLI) run(ctx context.Context, desc string, args ...string) (string, error) {
	res, err := o.runner.Run(ctx, desc, append([]string{o.bin}, args...)...)
	return strings.TrimSpace(string(res.Stdout)), err
}

// revParse resolves a ref or checksum in repo.
func (o ostreeCLI) revParse(ctx context.Context, repo, rev string) (string, error) {
	return o.run(ctx, "resolving "+rev, "rev-parse", "--repo="+repo, rev)
}

// commitInfo is the version metadata and timestamp of a commit.
func (o ostreeCLI) commitInfo(ctx context.Context, repo, csum string) (version string, ts uint64, err error) {
	out, err := o.run(ctx, "reading commit "+csum, "show", "--repo="+repo, csum)
	if err != nil {
		return "", 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Version":
			version = v
		case "Date":
			if t, perr := time.Parse("2006-01-02 15:04:05 -0700", v); perr == nil {
				ts = uint64(t.Unix())
			}
		}
	}
	return version, ts, nil
}

// remotePath returns the local directory a file:// remote points to; the
// stand-in pulls with pull-local, which needs a path.
func (o ostreeCLI) remotePath(ctx context.Context, repo, remote string) (string, error) {
	out, err := o.run(ctx, "reading remote "+remote, "remote", "show-url", "--repo="+repo, remote)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(out)
	if err != nil || u.Scheme != "file" {
		return "", fmt.Errorf("remote %s: url %q: the stand-in supports file:// remotes only", remote, out)
	}
	return u.Path, nil
}

// pullRef pulls ref from src into repo as remote:ref, writing the objects
// (honouring the repo's core.per-object-fsync) and returns the commit.
func (o ostreeCLI) pullRef(ctx context.Context, repo, src, remote, ref string) (string, error) {
	if _, err := o.run(ctx, "pulling "+remote+":"+ref, "pull-local", "--repo="+repo, "--remote="+remote, src, ref); err != nil {
		return "", err
	}
	return o.revParse(ctx, repo, remote+":"+ref)
}

// pullCommit pulls one commit by checksum.
func (o ostreeCLI) pullCommit(ctx context.Context, repo, src, csum string) error {
	_, err := o.run(ctx, "pulling commit "+csum, "pull-local", "--repo="+repo, src, csum)
	return err
}

// checkout writes the tree of csum into dir (hardlinks into the repo, as a
// real deployment is).
func (o ostreeCLI) checkout(ctx context.Context, repo, csum, dir string, userMode bool) error {
	args := []string{"checkout", "--repo=" + repo}
	if userMode {
		args = append(args, "-U")
	}
	_, err := o.run(ctx, "checking out "+csum, append(args, csum, dir)...)
	return err
}

// repoMode is "bare" for root (a real /ostree/repo), else "bare-user".
func repoMode() string {
	if os.Geteuid() == 0 {
		return "bare"
	}
	return "bare-user"
}

func (o ostreeCLI) isUserMode(ctx context.Context, repo string) bool {
	out, err := o.run(ctx, "reading repo mode", "config", "--repo="+repo, "get", "core.mode")
	return err == nil && out == "bare-user"
}

// splitRefspec splits "remote:ref".
func splitRefspec(refspec string) (remote, ref string, err error) {
	remote, ref, ok := strings.Cut(refspec, ":")
	if !ok || remote == "" || ref == "" {
		return "", "", fmt.Errorf("invalid refspec %q: want REMOTE:REF", refspec)
	}
	return remote, ref, nil
}

// isChecksum reports whether s looks like an ostree commit checksum.
func isChecksum(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := strconv.ParseUint(s[:16], 16, 64)
	return err == nil && strings.Trim(s, "0123456789abcdef") == ""
}
