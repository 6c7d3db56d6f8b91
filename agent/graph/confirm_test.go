package graph_test

import (
	"errors"
	"testing"

	"github.com/update-agent/update-agent/agent/graph"
	"github.com/update-agent/update-agent/agent/rpmostree"
)

func TestConfirmStream(t *testing.T) {
	on := func(meta map[string]any) rpmostree.Deployment {
		return rpmostree.Deployment{Checksum: sum('b'), Version: "40.2", Staged: true, BaseCommitMeta: meta}
	}
	label := func(s string) map[string]any {
		return map[string]any{"ostree.container.image-config": `{"config":{"Labels":{"com.coreos.stream":"` + s + `"}}}`}
	}
	for _, tc := range []struct {
		name  string
		d     rpmostree.Deployment
		want  string
		wrong bool
	}{
		{"on the stream", on(label("stable")), "stable", false},
		{"another stream", on(label("next")), "stable", true},
		{"commit key, another stream", on(map[string]any{"fedora-coreos.stream": "testing"}), "stable", true},
		{"no stream named: cannot tell", on(nil), "stable", false},
		{"not from a graph", on(label("next")), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := graph.ConfirmStream(tc.d, tc.want)
			if (err != nil) != tc.wrong {
				t.Fatalf("ConfirmStream = %v, want wrong stream %v", err, tc.wrong)
			}
			if err != nil && (!errors.Is(err, graph.ErrWrongStream) || err.PulledChecksum() != sum('b')) {
				t.Errorf("error %v names %q", err, err.PulledChecksum())
			}
		})
	}
}
