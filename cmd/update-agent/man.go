package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"
)

// manPage renders update-agent(8) from the same text -h prints (the
// subcommands' summaries, options and examples), so the two cannot drift:
// TestManPageIsCurrent compares it with the packaged page.
func manPage() string {
	var b strings.Builder
	b.WriteString(`.\" Generated from update-agent's -h texts: go test ./cmd/update-agent -run TestManPageIsCurrent -update
.TH UPDATE-AGENT 8 "" "update-agent" "System Administration"
.SH NAME
update-agent \- stage rpm-ostree updates without disturbing the local etcd member, reboot the cluster one safe node at a time
.SH SYNOPSIS
.B update-agent
.I subcommand
.RI [ options ]
.SH DESCRIPTION
update-agent runs as
.B update-agent.service
on rpm-ostree hosts (Fedora CoreOS, RHCOS). It stages each OS update gently beside etcd,
takes a reboot slot from a lease semaphore in etcd, moves etcd leadership away, runs the
pre-reboot hooks and finalizes the staged deployment; after the boot it checks the deployment
and the member, then frees the slot. Its configuration is TOML fragments under
.IR /usr/lib/update-agent/config.d/ ", " /run/update-agent/config.d/ " and " /etc/update-agent/config.d/ ,
each directory over the one before, files in name order; read what it does with
.BR "journalctl \-u update-agent" .
.SH COMMANDS
`)
	cs := commands()
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		fmt.Fprintf(&b, ".SS %s\n%s.\n", roff(c.name), roff(c.summary))
		if vs, ok := verbs[c.name]; ok {
			for _, v := range vs {
				fmt.Fprintf(&b, ".TP\n.B %s %s\n%s.\n", roff(c.name), roff(v.name), roff(v.summary))
				b.WriteString(helpBlock(c.name, v.name))
			}
			continue
		}
		b.WriteString(helpBlock(c.name))
	}
	fmt.Fprintf(&b, `.SH EXIT STATUS
.TP
.B %d
Success; for doctor, every check passed.
.TP
.B %d
A failure; for doctor, a check failed.
.TP
.B %d
A bad command line.
.TP
.B %d
doctor found nothing wrong, but the cluster holds reboots now (an etcd alarm, an unhealthy member, no leader, a gate that holds).
.TP
.B %d
The configuration cannot be loaded (the message names the file and key), or the daemon cannot use bootc (too old, or its status unreadable); systemd does not restart the daemon.
.TP
.B %d
Another update driver (zincati) owns rpm-ostree on this host, or bootc's own updater (bootc-fetch-apply-updates.timer) can reboot it without a slot (updates.mask_bootc_timer); systemd does not restart the daemon.
.TP
.B %d
lock.enabled = false on a host found to run an etcd member; systemd does not restart the daemon.
.TP
.B %d
stage-once staged the update graph's release from another stream than the one followed, and discarded it.
`, exitOK, exitFailure, exitUsage, exitWaiting, exitBadConfig, exitForeignDriver, exitMemberNoLock, exitWrongStream)
	b.WriteString(`.SH FILES
.TP
.I /usr/lib/update-agent/config.d/00-defaults.toml
The defaults, every key with its value.
.TP
.I /etc/update-agent/config.d/*.toml
The operator's fragments; unknown keys are errors.
.TP
.I /var/lib/update-agent/
The agent's state: the update in progress, the I/O policy to put back after a crash.
.TP
.I /run/update-agent/control.sock
The daemon's control socket (status, update-now).
.TP
.I /run/update-agent/metrics.sock
Prometheus metrics, by default (metrics.listen).
.SH SEE ALSO
.BR rpm-ostree (1),
.BR zincati (8),
.BR journalctl (1),
.BR systemd.resource-control (5);
the configuration reference, operations and design documents under
.IR /usr/share/doc/update-agent/docs/ .
`)
	return b.String()
}

// helpBlock is a subcommand's -h text, verbatim.
func helpBlock(args ...string) string {
	var out bytes.Buffer
	if err := run(&cmdEnv{stdout: &out, stderr: &out}, append(args, "-h")); err != nil && !errors.Is(err, flag.ErrHelp) {
		return roff(fmt.Sprintf("(-h failed: %v)", err)) + "\n"
	}
	text := strings.TrimSpace(out.String())
	var b strings.Builder
	b.WriteString(".PP\n.nf\n.RS 4\n")
	for _, line := range strings.Split(text, "\n") {
		b.WriteString(roffLine(line) + "\n")
	}
	b.WriteString(".RE\n.fi\n")
	return b.String()
}

// roff escapes text for a roff paragraph: backslashes and minus signs.
func roff(s string) string {
	return strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
}

// roffLine escapes a line of a no-fill block: also a leading dot or quote,
// which roff would read as a request.
func roffLine(s string) string {
	s = roff(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	if s == "" {
		s = `\&`
	}
	return s
}
