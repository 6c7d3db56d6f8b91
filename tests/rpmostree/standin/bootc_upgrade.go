package standin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// upgradeCmd is `bootc upgrade`, with cli.rs's flags and conflicts.
func (c *bootcCLI) upgradeCmd(args []string) error {
	const usage = "bootc upgrade [OPTIONS]"
	specs := []opt{{long: "quiet"}, {long: "check"}, {long: "apply"}, {long: "soft-reboot", arg: true}, {long: "tag", arg: true},
		{long: "progress-fd", arg: true}}
	if c.hasDownloadOnly() {
		specs = append(specs, opt{long: "download-only"}, opt{long: "from-downloaded"})
	}
	p, err := bootcOpts(args, usage, specs)
	if err != nil {
		return err
	}
	if err := conflicts(p, usage, [2]string{"check", "apply"}, [2]string{"download-only", "check"},
		[2]string{"download-only", "apply"}, [2]string{"from-downloaded", "check"},
		[2]string{"from-downloaded", "download-only"}, [2]string{"soft-reboot", "check"}); err != nil {
		return err
	}
	if p.has("tag") || p.has("soft-reboot") {
		return errors.New("Upgrading: the stand-in does not implement --tag nor --soft-reboot")
	}
	// A stop (SIGTERM, SIGINT) interrupts the pull, as it kills bootc.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	st, ot, unlock, err := c.open(ctx)
	if err != nil {
		return fmt.Errorf("Upgrading: %w", err)
	}
	reboot, err := c.upgrade(ctx, st, ot, p)
	unlock()
	if err != nil {
		return fmt.Errorf("Upgrading: %w", err)
	}
	if reboot {
		stop()
		return c.reboot(context.Background())
	}
	return nil
}

// upgrade follows cli.rs's upgrade(): --from-downloaded unlocks what is
// staged; --check reads the manifest only; otherwise pull, then: the
// staged digest unchanged toggles the download-only lock as asked, the
// booted digest unchanged is "No update available.", else stage (locked
// with --download-only). It returns whether to reboot (--apply).
func (c *bootcCLI) upgrade(ctx context.Context, st store, ot ostreeCLI, p parsed) (bool, error) {
	deps, staged, err := st.load(ctx)
	if err != nil {
		return false, err
	}
	booted := deps.Booted
	if c.packageMode {
		return false, errors.New("No image source specified")
	}
	apply := p.has("apply")
	if p.has("from-downloaded") {
		if staged == nil {
			return false, errors.New("No staged deployment found")
		}
		if staged.Locked {
			if err := st.unlock(ctx, *staged); err != nil {
				return false, err
			}
			fmt.Fprintln(c.stdout, "Staged deployment will now be applied on reboot")
		} else {
			fmt.Fprintln(c.stdout, "Staged deployment is already set to apply on reboot")
		}
		return apply, nil
	}
	// The image followed is the staged one's, else the booted one's (spec).
	refspec := booted.Origin
	if staged != nil {
		refspec = staged.Deployment.Origin
	}
	remote, ref, err := splitRefspec(refspec)
	if err != nil {
		return false, err
	}
	src, err := ot.remotePath(ctx, st.repo(), remote)
	if err != nil {
		return false, err
	}
	tip, err := ot.revParse(ctx, src, ref)
	if err != nil {
		return false, fmt.Errorf("Fetching manifest for %s: %w", imageOf(refspec).Image, err)
	}
	img := imageDisplay(refspec)
	if p.has("check") {
		// bootc's importer answers "already present" for an image whose
		// layers are in the host's store, staged or not.
		if tip == booted.Checksum || c.hasCommit(ctx, ot, st.repo(), tip) {
			fmt.Fprintf(c.stdout, "No changes in: %s\n", img)
			return false, nil
		}
		v, ts, err := ot.commitInfo(ctx, src, tip)
		if err != nil {
			return false, err
		}
		if err := writeJSON(c.cacheFile(), cachedUpdate{Booted: booted.Checksum, Checksum: tip, Refspec: refspec, Version: v, TS: ts}); err != nil {
			return false, err
		}
		fmt.Fprintf(c.stdout, "Update available for: %s\n", img)
		if v != "" {
			fmt.Fprintf(c.stdout, "  Version: %s\n", v)
		}
		fmt.Fprintf(c.stdout, "  Digest: %s\n", imageDigest(tip))
		// ManifestDiff::print (bootc-dev/bootc
		// crates/ostree-ext/src/container/mod.rs) against the booted
		// image: one layer per stand-in image, of unknown size.
		fmt.Fprintf(c.stdout, "Total new layers: %-4d  Size: %s\n", 1, formatSize(0))
		fmt.Fprintf(c.stdout, "Removed layers:   %-4d  Size: %s\n", 1, formatSize(0))
		fmt.Fprintf(c.stdout, "Added layers:     %-4d  Size: %s\n", 1, formatSize(0))
		return false, nil
	}
	if err := sleepCtx(ctx, c.cfg.PullDelay); err != nil {
		return false, err
	}
	if _, err := ot.pullRef(ctx, st.repo(), src, remote, ref); err != nil {
		return false, fmt.Errorf("Pulling %s: %w", img, err)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	downloadOnly := p.has("download-only")
	switch {
	case staged != nil && staged.Deployment.Checksum == tip:
		changed := false
		if downloadOnly && !staged.Locked {
			if err := st.lock(ctx, *staged); err != nil {
				return false, err
			}
			fmt.Fprintln(c.stdout, "Image downloaded, but will not be applied on reboot")
			changed = true
		} else if !downloadOnly && staged.Locked {
			if err := st.unlock(ctx, *staged); err != nil {
				return false, err
			}
			fmt.Fprintln(c.stdout, "Staged deployment will now be applied on reboot")
			changed = true
		}
		if !changed {
			fmt.Fprintln(c.stdout, "Staged update present, not changed")
		}
		return apply, nil
	case tip == booted.Checksum:
		fmt.Fprintln(c.stdout, "No update available.")
		return false, nil
	}
	v, ts, err := ot.commitInfo(ctx, st.repo(), tip)
	if err != nil {
		return false, err
	}
	nd, err := st.stage(ctx, Dep{OSName: booted.OSName, Checksum: tip, Origin: refspec, Version: v, Timestamp: ts}, deps, staged, downloadOnly)
	if err != nil {
		return false, fmt.Errorf("Staging: %w", err)
	}
	fmt.Fprintf(c.stdout, "Queued for next boot: %s\n", img)
	if nd.Version != "" {
		fmt.Fprintf(c.stdout, "  Version: %s\n", nd.Version)
	}
	fmt.Fprintf(c.stdout, "  Digest: %s\n", imageDigest(nd.Checksum))
	return apply, nil
}

func (c *bootcCLI) hasCommit(ctx context.Context, ot ostreeCLI, repo, csum string) bool {
	if _, err := os.Stat(repo); err != nil {
		return false
	}
	_, err := ot.run(ctx, "looking for "+csum, "show", "--repo="+repo, csum)
	return err == nil
}
