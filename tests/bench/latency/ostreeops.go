package latency

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// osName is the ostree guest's stateroot (tests/guest/build-ostree-image.sh).
const osName = "debian"

// bootedCommit is the booted deployment's checksum per `ostree admin status`.
func bootedCommit(ctx context.Context, g Guest) (string, error) {
	out, err := sh(ctx, g, "ostree admin status")
	if err != nil {
		return "", err
	}
	deps, err := ParseAdminStatus(out)
	if err != nil {
		return "", err
	}
	for _, d := range deps {
		if d.Booted {
			return d.Checksum, nil
		}
	}
	return "", fmt.Errorf("ostree admin status shows no booted deployment:\n%s", out)
}

// makeOstreeUpdates makes bootable updates on the ostree guest. The update
// server's repo (on the unthrottled data disk) gets the booted commit's
// objects once, "gen-0" (the booted tree as a commit of os/stable: the
// booted commit is bound to its build ref, which a pull of os/stable
// refuses) and the update: gen-0's tree plus mkupdate's files (under
// /usr/share/mkupdate). The booted deployment's origin becomes fedora:os/stable.
// base is the booted commit: Reset keeps it booted and alone.
func makeOstreeUpdates(ctx context.Context, g Guest, l Layout, size string, files int) (base, update string, err error) {
	if base, err = bootedCommit(ctx, g); err != nil {
		return "", "", err
	}
	work := l.Scratch + "/mkupdate"
	out, err := sh(ctx, g, strings.Join([]string{
		"set -e",
		"rm -rf " + l.UpdateRepo + " " + work,
		// bare, as the host repo: pull-local copies the base's objects
		// without converting them (an archive repo would recompress the
		// whole base tree, minutes under TCG).
		"ostree init --repo=" + l.UpdateRepo + " --mode=bare",
		"ostree pull-local --repo=" + l.UpdateRepo + " " + l.Repo + " " + base + " >/dev/null",
		"gen0=$(ostree commit --repo=" + l.UpdateRepo + " -b os/stable --tree=ref=" + base +
			" --add-metadata-string=version=gen-0 -s gen-0 --fsync=false)",
		"rpm-ostree standin-init --osname=" + osName + " --remote=fedora --url=file://" + l.UpdateRepo + " os/stable >/dev/null",
		fmt.Sprintf("mkupdate -repo %s -ref os/stable -base $gen0 -size %s -files %d -seed 8 -generation 1 -workdir %s",
			l.UpdateRepo, size, files, work),
		"rm -rf " + work,
	}, "\n"))
	if err != nil {
		return "", "", fmt.Errorf("making the ostree guest's update: %w", err)
	}
	return base, strings.TrimSpace(lastLine(out)), nil
}

// resetOstree brings the booted sysroot back to "base booted and alone,
// nothing staged, the update's objects gone from the host repo", with no
// policy left on the daemon or the disk: every scenario pulls and deploys
// the whole update again.
func resetOstree(ctx context.Context, g Guest, l Layout, base, update string) error {
	_, err := sh(ctx, g, strings.Join([]string{
		"systemctl stop update-agent " + companionUnit + " rpm-ostreed 2>/dev/null; systemctl reset-failed update-agent " + companionUnit + " rpm-ostreed 2>/dev/null; true",
		"rm -rf /var/lib/update-agent /etc/update-agent/config.d/* /run/systemd/system/rpm-ostreed.service.d " + l.Scratch + "/bench-*",
		// What the 2020 recipe set, back to standin-init's.
		"ostree config --repo=" + l.Repo + " set core.per-object-fsync false",
		"echo " + update + " > " + l.UpdateRepo + "/refs/heads/os/stable",
		"echo none > /sys/block/" + l.Dev + "/queue/scheduler",
		"systemctl daemon-reload",
		"systemctl start rpm-ostreed",
		"rpm-ostree cleanup -p >/dev/null",
		// The pulled ref goes, then every object only it reached.
		"(ostree refs --repo=" + l.Repo + " --delete fedora:os/stable 2>/dev/null; true)",
		"ostree prune --repo=" + l.Repo + " --refs-only >/dev/null",
		"sync", "echo 3 > /proc/sys/vm/drop_caches",
	}, " && "))
	if err != nil {
		return err
	}
	out, err := sh(ctx, g, "ostree admin status; ls /run/ostree; ostree --repo="+l.Repo+" show "+update+" >/dev/null 2>&1 && echo UPDATE-PRESENT; true")
	if err != nil {
		return err
	}
	return checkReset(out, base)
}

// checkReset checks the output of `ostree admin status; ls /run/ostree;
// (show update && echo UPDATE-PRESENT)` after a reset: base booted and the
// only deployment, nothing staged, the update's commit gone.
func checkReset(out, base string) error {
	deps, err := ParseAdminStatus(out)
	if err != nil {
		return err
	}
	if len(deps) != 1 || !deps[0].Booted || deps[0].Checksum != base {
		return fmt.Errorf("after the reset, want only %s booted; ostree admin status:\n%s", base, out)
	}
	for _, bad := range []string{"staged-deployment", "UPDATE-PRESENT"} {
		if strings.Contains(out, bad) {
			return fmt.Errorf("after the reset: %s left:\n%s", bad, out)
		}
	}
	return nil
}

// Reboot is one timed reboot of the ostree guest under a disk's throttle.
type Reboot struct {
	Disk   string
	Staged bool // an update was staged (unlocked): shutdown finalizes it
	// Total: the request until ssh answers and systemd has settled (host
	// clock). Shutdown: the request until the old boot's last journal
	// entry (guest clock).
	Total, Shutdown time.Duration
	// Finalize is ostree-finalize-staged.service's stop job (its ExecStop
	// runs `ostree admin finalize-staged`): zero when nothing was staged.
	Finalize time.Duration
	Booted   string // what booted (ostree admin status)
}

// measureReboots times, under disk d's throttle, a reboot with nothing
// staged and one that finalizes the update staged (unlocked) just before;
// the guest ends booted in the update.
func measureReboots(ctx context.Context, g Guest, l Layout, d Disk, base, update string, logf func(string, ...any)) ([]Reboot, error) {
	var out []Reboot
	for _, staged := range []bool{false, true} {
		if err := throttle(ctx, g, l, 0, 0); err != nil {
			return out, err
		}
		if err := resetOstree(ctx, g, l, base, update); err != nil {
			return out, err
		}
		if staged {
			logf("%s: staging the update (unthrottled, unlocked) for a finalizing reboot", d.Name)
			if _, err := sh(ctx, g, "rpm-ostree upgrade >"+l.Scratch+"/bench-upgrade.log 2>&1 && ostree admin status | grep -Eq '"+update+"[.][0-9]+ [(]staged[)]' && test ! -e /run/ostree/staged-deployment-locked && sync && echo 3 > /proc/sys/vm/drop_caches"); err != nil {
				return out, fmt.Errorf("staging for the finalizing reboot: %w", err)
			}
		}
		if err := throttle(ctx, g, l, d.IOPS, d.BPS); err != nil {
			return out, err
		}
		logf("%s: rebooting (staged: %v)", d.Name, staged)
		r, err := timedReboot(ctx, g, l)
		if err != nil {
			return out, err
		}
		r.Disk, r.Staged = d.Name, staged
		want := base
		if staged {
			want = update
		}
		if r.Booted != want {
			return out, fmt.Errorf("%s: after the reboot (staged: %v) %s booted, want %s", d.Name, staged, r.Booted, want)
		}
		if staged && r.Finalize == 0 {
			return out, fmt.Errorf("%s: the finalizing reboot has no stop span of ostree-finalize-staged.service", d.Name)
		}
		logf("%s: reboot (staged: %v): %v in all, shutdown %v, finalization %v", d.Name, staged,
			r.Total.Round(100*time.Millisecond), r.Shutdown.Round(100*time.Millisecond), r.Finalize.Round(10*time.Millisecond))
		out = append(out, r)
	}
	return out, throttle(ctx, g, l, 0, 0)
}

// timedReboot reboots and reads the shutdown's times from the old boot's
// journal. /usr's overlay (installUsr) is gone after it: installed again.
func timedReboot(ctx context.Context, g Guest, l Layout) (Reboot, error) {
	reqOut, err := sh(ctx, g, "date +%s%N")
	if err != nil {
		return Reboot{}, err
	}
	requested, err := strconv.ParseInt(strings.TrimSpace(reqOut), 10, 64)
	if err != nil {
		return Reboot{}, fmt.Errorf("guest clock: %q", reqOut)
	}
	start := time.Now()
	if err := g.RebootWith(ctx, "systemctl --no-block reboot"); err != nil {
		return Reboot{}, err
	}
	r := Reboot{Total: time.Since(start)}
	if err := installUsr(ctx, g, l); err != nil {
		return r, err
	}
	last, err := sh(ctx, g, "journalctl -b -1 -n 1 -o json --no-pager")
	if err != nil {
		return r, err
	}
	end, err := lastEntryTime([]byte(last))
	if err != nil {
		return r, err
	}
	r.Shutdown = time.Duration(end - requested)
	unit, err := sh(ctx, g, "journalctl -b -1 -o json --no-pager -u ostree-finalize-staged.service")
	if err != nil {
		return r, err
	}
	if r.Finalize, err = FinalizeSpan([]byte(unit)); err != nil {
		return r, err
	}
	r.Booted, err = bootedCommit(ctx, g)
	return r, err
}

// returnToBase makes base the booted deployment again after a finalizing
// reboot (unthrottled): deploy it, reboot, remove the update's deployment.
func returnToBase(ctx context.Context, g Guest, l Layout, base string) error {
	if err := throttle(ctx, g, l, 0, 0); err != nil {
		return err
	}
	if _, err := sh(ctx, g, "printf '[origin]\\nrefspec=fedora:os/stable\\n' >"+l.Scratch+"/base.origin && ostree admin deploy --os="+osName+" --origin-file="+l.Scratch+"/base.origin "+base+" >/dev/null"); err != nil {
		return fmt.Errorf("deploying the base again: %w", err)
	}
	if err := g.RebootWith(ctx, "systemctl --no-block reboot"); err != nil {
		return err
	}
	if err := installUsr(ctx, g, l); err != nil {
		return err
	}
	out, err := sh(ctx, g, "ostree admin status")
	if err != nil {
		return err
	}
	deps, err := ParseAdminStatus(out)
	if err != nil {
		return err
	}
	for i := len(deps) - 1; i >= 0; i-- {
		if !deps[i].Booted {
			if _, err := sh(ctx, g, "ostree admin undeploy "+strconv.Itoa(i)+" >/dev/null"); err != nil {
				return err
			}
		}
	}
	if b, err := bootedCommit(ctx, g); err != nil || b != base {
		return fmt.Errorf("returning to the base: %s booted (%v), want %s", b, err, base)
	}
	return nil
}

// selectScheduler selects sched on /sys/block/dev and checks that the
// kernel took it (bfq is a module: Install loads it).
func selectScheduler(ctx context.Context, g Guest, dev, sched string) error {
	f := "/sys/block/" + dev + "/queue/scheduler"
	out, err := sh(ctx, g, "echo "+sched+" > "+f+" && cat "+f)
	if err != nil {
		return fmt.Errorf("selecting %s on %s: %w", sched, dev, err)
	}
	if !strings.Contains(out, "["+sched+"]") {
		return fmt.Errorf("selecting %s on %s: the kernel says %q", sched, dev, strings.TrimSpace(out))
	}
	return nil
}
