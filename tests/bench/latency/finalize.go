package latency

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/update-agent/update-agent/tests/guest"
)

// Deployment is one deployment of `ostree admin status`.
type Deployment struct {
	OSName, Checksum string
	Serial           int
	Booted, Staged   bool
}

// adminStatusLine is a deployment's first line in `ostree admin status`
// (libostree 2022.7): "* " marks the booted one, others are indented; a
// staged or rollback one says so in parentheses.
var adminStatusLine = regexp.MustCompile(`^(\* |\s*)(\S+) ([0-9a-f]{64})\.(\d+)(?: \((\w+)\))?$`)

// ParseAdminStatus reads the deployments of `ostree admin status`, in its
// order (index 0 first, as `ostree admin undeploy` counts).
func ParseAdminStatus(out string) ([]Deployment, error) {
	var deps []Deployment
	for _, line := range strings.Split(out, "\n") {
		m := adminStatusLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[4])
		deps = append(deps, Deployment{OSName: m[2], Checksum: m[3], Serial: n, Booted: m[1] == "* ", Staged: m[5] == "staged"})
	}
	if len(deps) == 0 {
		return nil, fmt.Errorf("ostree admin status shows no deployment:\n%s", out)
	}
	return deps, nil
}

// systemd's catalog ids of a unit's stop job starting and ending.
const (
	msgUnitStopping = "de5b426a63be47a7b6ac3eaac82e2f6f"
	msgUnitStopped  = "9d1aaa27d60140bd96365438aad20286"
)

// entryTime is an entry's __REALTIME_TIMESTAMP (µs) in Unix ns.
func entryTime(e map[string]any) (int64, error) {
	s, _ := e["__REALTIME_TIMESTAMP"].(string)
	us, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("journal entry without __REALTIME_TIMESTAMP: %v", e)
	}
	return us * 1000, nil
}

// lastEntryTime is the time (Unix ns) of the last entry of a journal.
func lastEntryTime(b []byte) (int64, error) {
	es, err := guest.ParseJournal(b)
	if err != nil {
		return 0, err
	}
	if len(es) == 0 {
		return 0, fmt.Errorf("empty journal")
	}
	return entryTime(es[len(es)-1])
}

// FinalizeSpan is the stop job of ostree-finalize-staged.service in one
// boot's journal of that unit (journalctl -b -1 -u ... -o json): from
// systemd's "Stopping" to its "Stopped". The unit is started only when a
// deployment is staged (its .path unit), so a journal without a stop job
// is a shutdown that finalized nothing: zero. A stop that started and
// never ended (the journal stopped first) is an error.
func FinalizeSpan(journal []byte) (time.Duration, error) {
	es, err := guest.ParseJournal(journal)
	if err != nil {
		return 0, err
	}
	var start, end int64
	for _, e := range es {
		id, _ := e["MESSAGE_ID"].(string)
		switch {
		case id == msgUnitStopping && start == 0:
			if start, err = entryTime(e); err != nil {
				return 0, err
			}
		case id == msgUnitStopped && start != 0 && end == 0:
			if end, err = entryTime(e); err != nil {
				return 0, err
			}
		}
	}
	switch {
	case start == 0:
		return 0, nil
	case end == 0:
		return 0, fmt.Errorf("ostree-finalize-staged.service: a stop job started and never ended in the journal")
	}
	return time.Duration(end - start), nil
}

// RebootTable is the timed reboots as text: per disk, a reboot with
// nothing staged beside one that finalizes a staged update.
func RebootTable(rs []Reboot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %-8s %10s %12s %13s\n", "disk", "staged", "reboot_s", "shutdown_s", "finalize_s")
	for _, r := range rs {
		// The unit runs once anything was staged in that boot (its .path
		// unit), so a reboot with nothing staged may still stop it.
		staged, fin := "no", "-"
		if r.Staged {
			staged = "yes"
		}
		if r.Finalize > 0 {
			fin = fmt.Sprintf("%.1f", r.Finalize.Seconds())
		}
		fmt.Fprintf(&b, "%-22s %-8s %10.1f %12.1f %13s\n", r.Disk, staged, r.Total.Seconds(), r.Shutdown.Seconds(), fin)
	}
	return b.String()
}

// rebootSection is the results markdown's section on the timed reboots
// (empty without any).
func rebootSection(rs []Reboot) string {
	if len(rs) == 0 {
		return ""
	}
	return "\n## Finalization at shutdown\n\nOn the ostree guest, under each disk's throttle (no load running): a reboot with nothing staged, then one that finalizes the update staged just before without the lock (ostree-finalize-staged.service's ExecStop, `ostree admin finalize-staged`, writes the new boot entry). reboot_s: the request until ssh answers and systemd has settled in the new boot (host clock); shutdown_s: the request until the old boot's last journal entry; finalize_s: that unit's stop job, from systemd's \"Stopping\" to its \"Stopped\" (journalctl -b -1 -u ostree-finalize-staged -o json); its .path unit starts it once anything was staged in that boot, so after the scenarios' stagings it also stops, finding nothing, in a reboot with nothing staged (\"-\": it never ran). Each finalizing reboot booted the update.\n\n```\n" + RebootTable(rs) + "```\n"
}
