package txn

import (
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/rpmostree"
)

func TestDecide(t *testing.T) {
	deploy := &rpmostree.Transaction{Method: "Deploy", Sender: ":1.42", Path: "/org/projectatomic/rpmostree1/fedora_coreos"}
	install := &rpmostree.Transaction{Method: "PkgChange", Sender: ":1.77", Path: deploy.Path}
	ours := &Record{BootID: "b1", PID: 4242, Method: "Deploy", Argv: []string{"rpm-ostree", "deploy", "revision=abc"}}
	earlierBoot := &Record{BootID: "b0", PID: 4242, Method: "Deploy"}
	min := time.Minute
	cases := []struct {
		name   string
		in     Input
		kind   Kind
		forget bool
	}{
		{"idle", Input{BootID: "b1", Bound: 5 * min}, Go, false},
		{"idle, our earlier transaction ended", Input{Record: ours, BootID: "b1", Bound: 5 * min}, Go, true},
		{"idle, another agent process is about to stage", Input{Record: ours, RecordLive: true, BootID: "b1", Bound: 5 * min}, Go, false},
		{"busy with ours from an earlier life", Input{Active: deploy, Record: ours, BootID: "b1", Bound: 5 * min}, Cancel, false},
		{"busy with ours, even with no wait allowed (start)", Input{Active: deploy, Record: ours, BootID: "b1"}, Cancel, false},
		{"busy with another agent process's staging", Input{Active: deploy, Record: ours, RecordLive: true, BootID: "b1", Bound: 5 * min}, Wait, false},
		{"busy, our record is of an earlier boot", Input{Active: deploy, Record: earlierBoot, BootID: "b1", Bound: 5 * min}, Wait, true},
		{"busy with an operator's install after ours ended", Input{Active: install, Record: ours, BootID: "b1", Bound: 5 * min}, Wait, true},
		{"busy with an operator's deploy, no record", Input{Active: deploy, BootID: "b1", Bound: 5 * min}, Wait, false},
		{"busy with somebody else's, waited a while", Input{Active: install, BootID: "b1", Waited: 4 * min, Bound: 5 * min}, Wait, false},
		{"busy with somebody else's past the bound", Input{Active: install, BootID: "b1", Waited: 5 * min, Bound: 5 * min}, Busy, false},
		{"busy with somebody else's, no wait allowed", Input{Active: install, BootID: "b1"}, Busy, false},
	}
	for _, c := range cases {
		d := Decide(c.in)
		if d.Kind != c.kind || d.Forget != c.forget || d.Reason == "" {
			t.Errorf("%s: got %s forget=%v (%q), want %s forget=%v", c.name, d.Kind, d.Forget, d.Reason, c.kind, c.forget)
		}
	}
}

func TestMethodOf(t *testing.T) {
	c := &rpmostree.Client{Path: "/usr/bin/rpm-ostree", BypassDriver: true}
	for _, tc := range []struct {
		req  rpmostree.StageRequest
		want string
	}{
		{rpmostree.StageRequest{Kind: rpmostree.StageDeploy, Checksum: "abc"}, "Deploy"},
		{rpmostree.StageRequest{Kind: rpmostree.StageUpgrade}, "Upgrade"},
		{rpmostree.StageRequest{Kind: rpmostree.StageRebase, Ref: "ostree-unverified-registry:registry.example/x/os:stable"}, "Rebase"},
	} {
		if got := MethodOf(c.StageArgv(tc.req)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.req, got, tc.want)
		}
	}
	if got := MethodOf([]string{"/usr/bin/rpm-ostree", "cleanup", "-p"}); got != "" {
		t.Errorf("cleanup: %q", got)
	}
}
