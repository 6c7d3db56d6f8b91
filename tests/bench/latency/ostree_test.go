package latency

import (
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/bench/report"
)

const (
	csumA = "1111111111111111111111111111111111111111111111111111111111111111"
	csumB = "2222222222222222222222222222222222222222222222222222222222222222"
)

func TestLayoutFor(t *testing.T) {
	for in, want := range map[string]bool{"": true, "plain": false, "ostree": true} {
		l, err := LayoutFor(in)
		if err != nil || l.Ostree != want {
			t.Errorf("LayoutFor(%q) = ostree %v, %v", in, l.Ostree, err)
		}
	}
	if _, err := LayoutFor("rhcos"); err == nil {
		t.Error("an unknown guest accepted")
	}
	// The ostree guest measures its root disk, where the sysroot is, and
	// keeps the update server and results off it.
	if Ostree.Dev != "vda" || Plain.Dev != "vdb" || strings.HasPrefix(Ostree.UpdateRepo, "/var/lib/etcd") ||
		!strings.HasPrefix(Ostree.UpdateRepo, DataDir) || !strings.HasPrefix(Ostree.ResultDir, DataDir) || !strings.HasPrefix(Ostree.Scratch, DataDir) {
		t.Errorf("layouts: %+v / %+v", Ostree, Plain)
	}
}

func TestLayoutCheckRefusesSplitFSOnOstree(t *testing.T) {
	plan := Sweep().Only([]string{report.ScenarioAlone, report.ScenarioAgent + "+splitfs"})
	if err := Plain.Check(plan); err != nil {
		t.Errorf("plain: %v", err)
	}
	err := Ostree.Check(plan)
	if err == nil || !strings.Contains(err.Error(), "xfs-500iops-20MBs/d-agent+splitfs") {
		t.Errorf("ostree with a splitfs scenario: %v", err)
	}
	if err := Ostree.Check(MakePlan(false)); err != nil {
		t.Errorf("ostree, the plan: %v", err)
	}
}

func TestGroupByFS(t *testing.T) {
	p := MakePlan(false)
	// Out of order on purpose: a group keeps its disks in plan order.
	disks := []Disk{p.Disks[0], p.Disks[2], p.Disks[1], p.Disks[3]}
	var got []string
	for _, g := range GroupByFS(disks) {
		var names []string
		for _, d := range g.Disks {
			names = append(names, d.Name)
		}
		got = append(got, g.FS+":"+strings.Join(names, ","))
	}
	if want := "xfs:xfs-500iops-20MBs,xfs-3000iops-125MBs ext4:ext4-500iops-20MBs,ext4-3000iops-125MBs"; strings.Join(got, " ") != want {
		t.Errorf("groups %v, want %s", got, want)
	}
	if g := GroupByFS(nil); len(g) != 0 {
		t.Errorf("no disks: %v", g)
	}
}

// `ostree admin status` of libostree 2022.7 on the ostree guest.
func TestParseAdminStatusAndCheckReset(t *testing.T) {
	staged := "  debian " + csumB + ".0 (staged)\n    origin refspec: fedora:os/stable\n" +
		"* debian " + csumA + ".0\n    Version: base\n    Unlocked: development\n    origin refspec: fedora:os/stable\n"
	deps, err := ParseAdminStatus(staged)
	if err != nil || len(deps) != 2 || !deps[0].Staged || deps[0].Checksum != csumB || !deps[1].Booted || deps[1].Checksum != csumA {
		t.Fatalf("staged: %+v %v", deps, err)
	}
	if _, err := ParseAdminStatus("No deployments.\n"); err == nil {
		t.Error("no deployments accepted")
	}
	alone := "* debian " + csumA + ".1\n    Unlocked: development\n    origin refspec: fedora:os/stable\n"
	for name, tc := range map[string]struct {
		out  string
		base string
		ok   bool
	}{
		"base booted alone":        {alone + "\n", csumA, true},
		"another commit booted":    {alone, csumB, false},
		"update still staged":      {staged, csumA, false},
		"a rollback left":          {alone + "  debian " + csumB + ".0 (rollback)\n", csumA, false},
		"staged run file left":     {alone + "staged-deployment\n", csumA, false},
		"update's objects present": {alone + "UPDATE-PRESENT\n", csumA, false},
	} {
		if err := checkReset(tc.out, tc.base); (err == nil) != tc.ok {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// journalctl -b -1 -u ostree-finalize-staged.service -o json of a
// finalizing shutdown (fields cut to what the parser reads).
const finalizeJournal = `{"__REALTIME_TIMESTAMP":"1796216100000000","MESSAGE_ID":"7d4958e842da4a758f6c1cdc7b36dcc5","MESSAGE":"Starting ostree-finalize-staged.service - OSTree Finalize Staged Deployment..."}
{"__REALTIME_TIMESTAMP":"1796216100100000","MESSAGE_ID":"39f53479d3a045ac8e11786248231fbf","MESSAGE":"Finished ostree-finalize-staged.service - OSTree Finalize Staged Deployment."}
{"__REALTIME_TIMESTAMP":"1796216200000000","MESSAGE_ID":"de5b426a63be47a7b6ac3eaac82e2f6f","MESSAGE":"Stopping ostree-finalize-staged.service - OSTree Finalize Staged Deployment..."}
{"__REALTIME_TIMESTAMP":"1796216200500000","MESSAGE":"Finalizing staged deployment"}
{"__REALTIME_TIMESTAMP":"1796216212000000","MESSAGE":"Bootloader updated; bootconfig swap: yes; bootversion: boot.1.1, deployment count change: 1"}
{"__REALTIME_TIMESTAMP":"1796216212250000","MESSAGE_ID":"7ad2d189f7e94e70a38c781354912448","MESSAGE":"ostree-finalize-staged.service: Deactivated successfully."}
{"__REALTIME_TIMESTAMP":"1796216212250000","MESSAGE_ID":"9d1aaa27d60140bd96365438aad20286","MESSAGE":"Stopped ostree-finalize-staged.service - OSTree Finalize Staged Deployment."}
`

func TestFinalizeSpan(t *testing.T) {
	lines := strings.SplitAfter(finalizeJournal, "\n")
	for name, tc := range map[string]struct {
		journal string
		want    time.Duration
		ok      bool
	}{
		"finalizing shutdown":     {finalizeJournal, 12250 * time.Millisecond, true},
		"nothing staged: no unit": {"", 0, true},
		"started, never stopped":  {strings.Join(lines[:2], ""), 0, true},
		"stop never ended":        {strings.Join(lines[:5], ""), 0, false},
		"not json":                {"-- No entries --\n", 0, false},
	} {
		got, err := FinalizeSpan([]byte(tc.journal))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: %v %v, want %v (ok %v)", name, got, err, tc.want, tc.ok)
		}
	}
	if ns, err := lastEntryTime([]byte(finalizeJournal)); err != nil || ns != 1796216212250000000 {
		t.Errorf("lastEntryTime %d %v", ns, err)
	}
	if _, err := lastEntryTime(nil); err == nil {
		t.Error("empty journal: no error")
	}
}

func TestRebootTable(t *testing.T) {
	got := RebootTable([]Reboot{
		{Disk: "xfs-500iops-20MBs", Total: 95 * time.Second, Shutdown: 12 * time.Second},
		{Disk: "xfs-500iops-20MBs", Total: 96 * time.Second, Shutdown: 13 * time.Second, Finalize: 1240 * time.Millisecond},
		{Disk: "xfs-500iops-20MBs", Staged: true, Total: 130 * time.Second, Shutdown: 40 * time.Second, Finalize: 27500 * time.Millisecond},
	})
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[1]), " ") != "xfs-500iops-20MBs no 95.0 12.0 -" ||
		strings.Join(strings.Fields(lines[2]), " ") != "xfs-500iops-20MBs no 96.0 13.0 1.2" ||
		strings.Join(strings.Fields(lines[3]), " ") != "xfs-500iops-20MBs yes 130.0 40.0 27.5" {
		t.Errorf("table:\n%s", got)
	}
	if rebootSection(nil) != "" || !strings.Contains(rebootSection([]Reboot{{Disk: "d"}}), "## Finalization at shutdown") {
		t.Error("reboot section")
	}
}

func TestParseWindow(t *testing.T) {
	w, err := parseWindow("No upgrade\n100 10 80 20 2000 900 15 90 120 4048\n")
	want := report.DiskIO{IOs: 5 + 100, Bytes: (10 + 2048) * 512, Span: 800}
	if err != nil || w.Start != 100 || w.End != 900 || w.Written != 2048*512 || w.IO != want {
		t.Errorf("window %+v %v, want IO %+v", w, err, want)
	}
	for _, bad := range []string{"", "100 900", "a b c d", "1 2 3 4 5", "100 2000 900 4048"} {
		if _, err := parseWindow(bad); err == nil {
			t.Errorf("parseWindow(%q) accepted", bad)
		}
	}
}

func TestDiskWithLoad(t *testing.T) {
	d, err := Disks[0].WithLoad("150:30")
	if err != nil || d.FioRate != 150 || d.PutRate != 30 || d.Name != Disks[0].Name || Disks[0].FioRate == 150 {
		t.Errorf("WithLoad(150:30) = %+v, %v", d, err)
	}
	for _, bad := range []string{"", "150", "150:", ":30", "0:30", "150:x", "-1:5"} {
		if _, err := Disks[0].WithLoad(bad); err == nil {
			t.Errorf("WithLoad(%q) accepted", bad)
		}
	}
}
