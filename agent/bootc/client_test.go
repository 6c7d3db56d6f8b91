package bootc

import (
	"errors"
	"slices"
	"testing"

	"github.com/update-agent/update-agent/agent/oplog"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		out     string
		want    Version
		tooOld  bool
		wantErr bool
	}{
		{out: "bootc 1.12.0\n", want: Version{1, 12, 0}},
		{out: "bootc 1.16.9", want: Version{1, 16, 9}},
		{out: "bootc 1.11.2", want: Version{1, 11, 2}, tooOld: true},
		{out: "bootc 1.1.6", want: Version{1, 1, 6}, tooOld: true},
		{out: "bootc 2.0", want: Version{2, 0, 0}},
		{out: "bootc 1.12.1-1.fc43", want: Version{1, 12, 1}},
		{out: "rpm-ostree 2024.9", wantErr: true},
		{out: "bootc x.y", wantErr: true},
		{out: "", wantErr: true},
	} {
		v, err := ParseVersion(tc.out)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseVersion(%q) err = %v, want error %v", tc.out, err, tc.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if v != tc.want {
			t.Errorf("ParseVersion(%q) = %v, want %v", tc.out, v, tc.want)
		}
		err = RequireDownloadOnly(v)
		if errors.Is(err, ErrTooOld) != tc.tooOld {
			t.Errorf("RequireDownloadOnly(%v) = %v, want too old %v", v, err, tc.tooOld)
		}
		if tc.tooOld && !contains(err.Error(), ">= 1.12.0") {
			t.Errorf("the refusal does not say what is needed: %v", err)
		}
	}
}

func TestParseCheck(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      CheckResult
		wantErr   bool
	}{
		{name: "update", out: "Update available for: docker://example/os:stable\n  Version: 43.2\n  Digest: " + d2 + "\nTotal new layers: 3\n",
			want: CheckResult{Available: true, Version: "43.2", Digest: d2}},
		{name: "update without version", out: "Update available for: docker://example/os:stable\n  Digest: " + d2 + "\n",
			want: CheckResult{Available: true, Digest: d2}},
		{name: "none", out: "No changes in: docker://example/os:stable\n"},
		{name: "no digest", out: "Update available for: docker://example/os:stable\n  Version: 43.2\n", wantErr: true},
		{name: "garbage", out: "hello\n", wantErr: true},
	} {
		got, err := ParseCheck([]byte(tc.out))
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: ParseCheck = %+v, %v; want %+v, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestArgv(t *testing.T) {
	c := &Client{Path: "/usr/bin/bootc"}
	for _, tc := range []struct{ got, want []string }{
		{c.StageArgv(), []string{"/usr/bin/bootc", "upgrade", "--download-only", "--quiet"}},
		{c.ApplyArgv(), []string{"/usr/bin/bootc", "upgrade", "--from-downloaded", "--apply"}},
		{c.CheckArgv(), []string{"/usr/bin/bootc", "upgrade", "--check"}},
		{c.StatusArgv(), []string{"/usr/bin/bootc", "status", "--format=json", "--format-version=1"}},
		{(&Client{}).StageArgv()[:1], []string{"bootc"}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("argv %q, want %q", tc.got, tc.want)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		stderr string
		code   int
		want   error
	}{
		{"error: No staged deployment found\n", 1, ErrNoStagedDeployment},
		{"error: Initiating reboot: Failed to invoke systemd-run: exit status 1\n", 1, ErrRebootFailed},
		{"error: Deployment contains local rpm-ostree modifications; cannot upgrade via bootc.\n", 1, ErrIncompatible},
		{"error: No image source specified\n", 1, ErrNoImage},
		{"error: unexpected argument '--download-only' found\n\nUsage: bootc upgrade [OPTIONS]\n", 2, ErrUsage},
		{"error: Pulling: connection refused\n", 1, nil},
	} {
		oe := &oplog.Error{Argv: []string{"bootc"}, ExitCode: tc.code, Stderr: tc.stderr, Err: errors.New("exit")}
		err := classify(oe)
		var back *oplog.Error
		if !errors.As(err, &back) || err.Error() != oe.Error() {
			t.Errorf("%q: the command's error is lost: %v", tc.stderr, err)
		}
		for _, s := range []error{ErrNoStagedDeployment, ErrRebootFailed, ErrIncompatible, ErrNoImage, ErrUsage} {
			if errors.Is(err, s) != (s == tc.want) {
				t.Errorf("%q: errors.Is(%v) = %v", tc.stderr, s, errors.Is(err, s))
			}
		}
	}
}
