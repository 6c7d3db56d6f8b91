package graph_test

import (
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/agent/graph"
	gt "github.com/update-agent/update-agent/agent/graph/graphtest"
)

func sum(c byte) string { return strings.Repeat(string(c), 64) }

// rel is a finished release of checksum sum(c).
func rel(v string, c byte) gt.Release {
	return gt.Release{Version: v, Checksum: sum(c), Rollout: gt.Done}
}

func TestChoose(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	barrier := []gt.Release{rel("40.1", 'a'), {Version: "40.2", Checksum: sum('b'), Barrier: true, Rollout: gt.Done}, rel("40.3", 'c'), rel("40.4", 'd')}
	deadEnd := []gt.Release{rel("40.1", 'a'), {Version: "40.2", Checksum: sum('b'), DeadEnd: "breaks etcd", Rollout: gt.Done}, rel("40.3", 'c')}
	rolling := []gt.Release{rel("40.1", 'a'), rel("40.2", 'b'),
		{Version: "40.3", Checksum: sum('c'), Rollout: &gt.Rollout{StartEpoch: now.Unix() - 3600, StartValue: 0, Minutes: 240}}}
	built := func(rels []gt.Release, wariness float64) graph.Graph {
		return gt.Throttle(gt.Build(rels), rels, wariness, now)
	}
	node := func(v string, c byte, age string, extra ...string) graph.Node {
		md := map[string]string{graph.KeyScheme: graph.SchemeChecksum, graph.KeyAgeIndex: age}
		for i := 0; i+1 < len(extra); i += 2 {
			md[extra[i]] = extra[i+1]
		}
		return graph.Node{Version: v, Payload: sum(c), Metadata: md}
	}
	downgrade := graph.Graph{Nodes: []graph.Node{node("40.1", 'a', "1"), node("40.2", 'b', "2")}, Edges: [][2]uint64{{1, 0}}}
	oci := graph.Graph{Nodes: []graph.Node{
		{Version: "41.1", Payload: "quay.example/os@sha256:" + sum('1'), Metadata: map[string]string{graph.KeyScheme: graph.SchemeOCI, graph.KeyAgeIndex: "0"}},
		{Version: "41.2", Payload: "quay.example/os@sha256:" + sum('2'), Metadata: map[string]string{graph.KeyScheme: graph.SchemeOCI, graph.KeyAgeIndex: "1"}},
	}, Edges: [][2]uint64{{0, 1}}}
	at := func(c byte) graph.Booted { return graph.Booted{Checksum: sum(c)} }
	for _, tc := range []struct {
		name     string
		g        graph.Graph
		booted   graph.Booted
		deny     []string
		pol      graph.Policy
		want     string // target version, "" none
		why      string // substring of Why
		deadEnd  bool
		notFound bool
	}{
		{name: "barrier first", g: built(barrier, 0), booted: at('a'), want: "40.2", why: "barrier"},
		{name: "past the barrier, the newest", g: built(barrier, 0), booted: at('b'), want: "40.4"},
		{name: "newest", g: built(barrier, 0), booted: at('d'), why: "is the newest"},
		{name: "dead end offers nothing", g: built(deadEnd, 0), booted: at('b'), deadEnd: true, why: "dead end (breaks etcd)"},
		{name: "around a dead end", g: built(deadEnd, 0), booted: at('a'), want: "40.3"},
		{name: "rollout reached the bold", g: built(rolling, 0.1), booted: at('a'), want: "40.3"},
		{name: "rollout not yet at this wariness", g: built(rolling, 0.9), booted: at('a'), want: "40.2"},
		{name: "denylisted newest", g: built(rolling, 0), booted: at('a'), deny: []string{sum('a'), sum('c')}, want: "40.2"},
		{name: "only denylisted", g: built(barrier, 0), booted: at('a'), deny: []string{sum('b')}, why: "already deployed"},
		{name: "downgrade refused", g: downgrade, booted: at('b'), why: "a downgrade, refused"},
		{name: "downgrade allowed", g: downgrade, booted: at('b'), pol: graph.Policy{AllowDowngrade: true}, want: "40.1"},
		{name: "not in graph", g: built(barrier, 0), booted: at('z'), notFound: true, why: "not in the update graph"},
		{name: "oci", g: oci, booted: graph.Booted{Image: "quay.example/os@sha256:" + sum('1')}, want: "41.2"},
		{name: "image host never matches a checksum node", g: built(barrier, 0), booted: graph.Booted{Checksum: sum('a'), Image: "x@sha256:" + sum('a')}, notFound: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := graph.Choose(tc.g, tc.booted, tc.deny, tc.pol)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if d.Target != nil {
				got = d.Target.Version
			}
			if got != tc.want {
				t.Errorf("target %q, want %q (why: %s)", got, tc.want, d.Why)
			}
			if !strings.Contains(d.Why, tc.why) {
				t.Errorf("why %q, want it to say %q", d.Why, tc.why)
			}
			if (d.Booted == nil) != tc.notFound {
				t.Errorf("booted found = %v, want %v", d.Booted != nil, !tc.notFound)
			}
			if d.Booted != nil && d.Booted.DeadEnd != tc.deadEnd {
				t.Errorf("dead end %v, want %v", d.Booted.DeadEnd, tc.deadEnd)
			}
		})
	}
}

func TestChooseUnreadableTarget(t *testing.T) {
	g := graph.Graph{Nodes: []graph.Node{
		{Version: "1", Payload: sum('a'), Metadata: map[string]string{graph.KeyScheme: "checksum", graph.KeyAgeIndex: "0"}},
		{Version: "2", Payload: sum('b'), Metadata: map[string]string{graph.KeyScheme: "checksum"}},
	}, Edges: [][2]uint64{{0, 1}}}
	if _, err := graph.Choose(g, graph.Booted{Checksum: sum('a')}, nil, graph.Policy{}); err == nil || !strings.Contains(err.Error(), "age_index") {
		t.Fatalf("err = %v, want the missing age_index named", err)
	}
}

// TestChooseLooksOnlyAtBooted: as zincati's find_update, a node without a
// scheme is nobody's booted release (no update, not an error), and an edge
// naming no node matters only when it leaves the booted release.
func TestChooseLooksOnlyAtBooted(t *testing.T) {
	ok := func(v string, c byte, age string) graph.Node {
		return graph.Node{Version: v, Payload: sum(c), Metadata: map[string]string{graph.KeyScheme: graph.SchemeChecksum, graph.KeyAgeIndex: age}}
	}
	noScheme := graph.Node{Version: "39.9", Payload: sum('z'), Metadata: map[string]string{graph.KeyAgeIndex: "0"}}
	g := graph.Graph{Nodes: []graph.Node{noScheme, ok("40.1", 'a', "1"), ok("40.2", 'b', "2")}, Edges: [][2]uint64{{0, 1}, {1, 2}, {2, 7}, {9, 0}}}

	d, err := graph.Choose(g, graph.Booted{Checksum: sum('z')}, nil, graph.Policy{})
	if err != nil || d.Booted != nil || d.Target != nil || !strings.Contains(d.Why, "not in the update graph") {
		t.Errorf("booted on a node without a scheme: %+v, %v; want not in the graph, no error", d, err)
	}
	d, err = graph.Choose(g, graph.Booted{Checksum: sum('a')}, nil, graph.Policy{})
	if err != nil || d.Target == nil || d.Target.Version != "40.2" {
		t.Errorf("a bad edge elsewhere: %+v, %v; want 40.2", d, err)
	}
	if _, err = graph.Choose(g, graph.Booted{Checksum: sum('b')}, nil, graph.Policy{}); err == nil || !strings.Contains(err.Error(), "beyond the 3 nodes") {
		t.Errorf("a bad edge from the booted release: %v, want it named", err)
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct{ name, in, err string }{
		{"ok", `{"nodes":[{"version":"1","payload":"p","metadata":{}}],"edges":[[0,0]]}`, ""},
		{"not json", `{"nodes":`, "decoding"},
		{"no edges", `{"nodes":[]}`, "no \"nodes\" or no \"edges\""},
		{"short edge", `{"nodes":[{"version":"1","payload":"p","metadata":{}}],"edges":[[0]]}`, "has 1 indexes"},
		{"edge beyond nodes: Choose's to find", `{"nodes":[{"version":"1","payload":"p","metadata":{}}],"edges":[[0,1]]}`, ""},
		{"negative index", `{"nodes":[],"edges":[[-1,0]]}`, "decoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := graph.Decode([]byte(tc.in))
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

func TestIdentity(t *testing.T) {
	// `systemd-id128 machine-id -a de35106b6ec24688b63afddaa156679b` on a
	// host with this machine ID.
	got, err := graph.NodeUUID("3d1219c7c4c5404aaa1f6d2a48adfda4\n")
	if err != nil || got != "975228d46dc94622b9bbe16671e2b58d" {
		t.Errorf("NodeUUID = %q, %v", got, err)
	}
	if _, err := graph.NodeUUID("uninitialized"); err == nil {
		t.Error("NodeUUID accepted a bad machine ID")
	}
	if p := graph.Platform("BOOT_IMAGE=/vmlinuz ignition.platform.id=qemu ostree=/ostree/boot.1"); p != "qemu" {
		t.Errorf("Platform = %q", p)
	}
	if a := graph.Basearch("amd64"); a != "x86_64" {
		t.Errorf("Basearch = %q", a)
	}
	for _, tc := range []struct {
		meta map[string]any
		want string
	}{
		{map[string]any{"fedora-coreos.stream": "stable"}, "stable"},
		{map[string]any{"ostree.container.image-config": `{"config":{"Labels":{"com.coreos.stream":"next"}}}`, "fedora-coreos.stream": "stable"}, "next"},
		{map[string]any{"ostree.manifest": `{"annotations":{"fedora-coreos.stream":"testing"}}`}, "testing"},
		{nil, ""},
	} {
		if got, _ := graph.Stream(tc.meta); got != tc.want {
			t.Errorf("Stream(%v) = %q, want %q", tc.meta, got, tc.want)
		}
	}
	if n := graph.ImageName("ostree-remote-image:fedora:docker://quay.example/fedora/coreos:stable"); n != "quay.example/fedora/coreos" {
		t.Errorf("ImageName = %q", n)
	}
	if n := graph.ImageName("ostree-unverified-registry:localhost:5000/os@sha256:" + sum('a')); n != "localhost:5000/os" {
		t.Errorf("ImageName = %q", n)
	}
	// The reference Fedora CoreOS's OCI migration rebases to.
	if n := graph.ImageName("ostree-remote-registry:fedora:quay.example/fedora/coreos:stable"); n != "quay.example/fedora/coreos" {
		t.Errorf("ImageName = %q", n)
	}
	if n := graph.ImageName("quay.example/fedora/coreos@sha256:" + sum('a')); n != "quay.example/fedora/coreos" {
		t.Errorf("ImageName = %q", n)
	}
}
