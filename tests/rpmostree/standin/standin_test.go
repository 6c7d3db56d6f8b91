package standin

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseOpts(t *testing.T) {
	specs := []opt{{long: "check"}, {long: "lock-finalization"}, {long: "register-driver", arg: true},
		{long: "pending", short: 'p'}, {long: "rollback", short: 'r'}, {long: "branch", short: 'b', arg: true}}
	cases := []struct {
		args    []string
		set     map[string]string
		pos     []string
		wantErr string
	}{
		{[]string{"--check", "x"}, map[string]string{"check": ""}, []string{"x"}, ""},
		{[]string{"", "--register-driver=update-agent"}, map[string]string{"register-driver": "update-agent"}, []string{""}, ""},
		{[]string{"--register-driver", "a", "b"}, map[string]string{"register-driver": "a"}, []string{"b"}, ""},
		{[]string{"-pr"}, map[string]string{"pending": "", "rollback": ""}, nil, ""},
		{[]string{"-bmain"}, map[string]string{"branch": "main"}, nil, ""},
		{[]string{"--", "--check"}, map[string]string{}, []string{"--check"}, ""},
		{[]string{"--nope"}, nil, nil, "Unknown option --nope"},
		{[]string{"-z"}, nil, nil, "Unknown option -z"},
		{[]string{"--register-driver"}, nil, nil, "Missing argument for --register-driver"},
	}
	for _, c := range cases {
		p, err := parseOpts(c.args, specs)
		if c.wantErr != "" {
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("%q: err = %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(p.set, c.set) || !reflect.DeepEqual(p.args, c.pos) {
			t.Errorf("%q: got %v %q %v", c.args, p.set, p.args, err)
		}
	}
}

func TestParseBusctlInhibitors(t *testing.T) {
	in := `{"type":"a(ssssuu)","data":[[["shutdown:sleep","etcd","snapshot","block",0,42],["idle","gnome","x","delay",1000,7]]]}`
	got, err := parseBusctlInhibitors([]byte(in))
	want := []Inhibitor{{"shutdown:sleep", "etcd", "snapshot", "block"}, {"idle", "gnome", "x", "delay"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, %v", got, err)
	}
	if _, err := parseBusctlInhibitors([]byte(`{"data":[]}`)); err == nil {
		t.Error("empty tuple accepted")
	}
}

func TestNextSerialAndIDs(t *testing.T) {
	a := &Dep{OSName: "os", Checksum: "aa", Serial: 0}
	b := &Dep{OSName: "os", Checksum: "aa", Serial: 1}
	if s := nextSerial("aa", a, b, nil); s != 2 {
		t.Errorf("serial = %d", s)
	}
	if s := nextSerial("bb", a, b); s != 0 {
		t.Errorf("serial = %d", s)
	}
	if a.ID() != "os-aa.0" {
		t.Errorf("id = %s", a.ID())
	}
	if !isChecksum(strings.Repeat("ab", 32)) || isChecksum("abc") || isChecksum(strings.Repeat("xy", 32)) {
		t.Error("isChecksum")
	}
}
