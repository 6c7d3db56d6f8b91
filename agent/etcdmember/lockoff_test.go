package etcdmember

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestJudgeLockOff(t *testing.T) {
	m := Match{Member: Member{Name: "cp1"}, Found: true, How: "member cp1: peer URL http://192.0.2.1:2380 matches 192.0.2.1 on eth0"}
	worker := Match{How: "a worker: no etcd member's peer or client URLs match this host"}
	unreadable := errors.New("listing processes: permission denied")
	for _, tc := range []struct {
		name string
		s    Signs
		want LockOff
		why  string
	}{
		{"nothing, no endpoints", Signs{}, LockOffWorker, "etcd.endpoints not set"},
		{"nothing, the cluster says worker", Signs{Asked: true, Match: worker}, LockOffWorker, "a worker"},
		{"etcd process", Signs{Processes: []string{"812"}}, LockOffMember, `process "etcd" runs (pid 812)`},
		{"client port listened on", Signs{Listeners: []netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:2379")}}, LockOffMember, "0.0.0.0:2379"},
		{"the cluster lists it", Signs{Asked: true, Match: m}, LockOffMember, "member cp1"},
		{"a sign beats what could not be read", Signs{Processes: []string{"9"}, ListenErr: unreadable, Asked: true, MatchErr: unreadable}, LockOffMember, "runs an etcd member"},
		{"processes unreadable", Signs{ProcErr: unreadable}, LockOffUnsure, "permission denied"},
		{"socket tables unreadable", Signs{ListenErr: unreadable}, LockOffUnsure, "cannot tell"},
		{"remote cluster unreachable", Signs{Asked: true, ListErr: errors.New("listing etcd members: context deadline exceeded")}, LockOffUnsure, "deadline"},
		{"the local endpoint does not answer", Signs{Asked: true, LocalOnly: true, ListErr: errors.New("listing etcd members: context deadline exceeded")}, LockOffWorker, "no member serves the local endpoints"},
		{"the local endpoint does not answer, but its port is listened on", Signs{Asked: true, LocalOnly: true, ListErr: errors.New("listing etcd members: context deadline exceeded"),
			EndpointListeners: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:12379")}}, LockOffUnsure, "127.0.0.1:12379"},
		{"the local member answers, but matching fails", Signs{Asked: true, LocalOnly: true, MatchErr: errors.New("this host matches several etcd members")}, LockOffUnsure, "several"},
		{"matching fails with a found match", Signs{Asked: true, Match: m, MatchErr: unreadable}, LockOffUnsure, "cannot tell"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := JudgeLockOff(tc.s)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("JudgeLockOff = %v, %q; want %v, containing %q", got, why, tc.want, tc.why)
			}
		})
	}
}

// TestLookSigns reads a made-up /proc: an etcd process by its comm, and
// listeners on etcd's ports whichever process holds them; a /proc that
// cannot be read leaves the verdict unsure.
func TestLookSigns(t *testing.T) {
	const header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	mk := func(t *testing.T, comm, tcp, tcp6 string) string {
		proc := t.TempDir()
		os.MkdirAll(filepath.Join(proc, "42"), 0o755)
		os.WriteFile(filepath.Join(proc, "42", "comm"), []byte(comm+"\n"), 0o644)
		os.MkdirAll(filepath.Join(proc, "net"), 0o755)
		if tcp != "" {
			os.WriteFile(filepath.Join(proc, "net", "tcp"), []byte(header+tcp), 0o644)
		}
		if tcp6 != "" {
			os.WriteFile(filepath.Join(proc, "net", "tcp6"), []byte(header+tcp6), 0o644)
		}
		return proc
	}
	const (
		sshd     = "   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 100 1 0 100 0 0 10 0\n"
		conn2379 = "   1: 0100007F:C350 0100007F:094B 01 00000000:00000000 00:00000000 00000000     0        0 101 1 0 100 0 0 10 0\n"
		peer2380 = "   2: 0B0200C0:094C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 102 1 0 100 0 0 10 0\n"
		client6  = "   0: 00000000000000000000000001000000:094B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 103 1 0 100 0 0 10 0\n"
	)
	for _, tc := range []struct {
		name           string
		comm, tcp, six string
		want           LockOff
		listeners      []string
	}{
		{"a worker: sshd, a connection to a remote etcd", "sshd", sshd + conn2379, "", LockOffWorker, nil},
		{"etcd's process", "etcd", sshd, "", LockOffMember, nil},
		{"a peer listener (a static pod's etcd)", "pause", sshd + peer2380, "", LockOffMember, []string{"192.0.2.11:2380"}},
		{"a client listener on IPv6", "sshd", sshd, client6, LockOffMember, []string{"[::1]:2379"}},
		{"no tcp table", "sshd", "", "", LockOffUnsure, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := LookSigns(t.Context(), mk(t, tc.comm, tc.tcp, tc.six), nil, nil)
			var ls []string
			for _, l := range s.Listeners {
				ls = append(ls, l.String())
			}
			if got, why := JudgeLockOff(s); got != tc.want || !slices.Equal(ls, tc.listeners) {
				t.Errorf("verdict %v (%s), listeners %v; want %v, %v", got, why, ls, tc.want, tc.listeners)
			}
		})
	}
	if got, why := JudgeLockOff(LookSigns(t.Context(), filepath.Join(t.TempDir(), "missing"), nil, nil)); got != LockOffUnsure {
		t.Errorf("an unreadable /proc: %v (%s), want unsure", got, why)
	}
}
