package adapters

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/state"
)

// An exact staging (updates.source = "graph") that leaves another release
// staged than the one chosen discards it and says so: it is never adopted.
func TestExactStagingDiscardsAnotherRelease(t *testing.T) {
	ctx := context.Background()
	env, o, stager := host(t)
	chosen := env.Publish(env.Ref, 1)
	other := env.Publish(env.Ref, 2)
	// rpm-ostree answering the deploy of chosen with other (a repository
	// that serves another commit under the name, a concurrent deploy).
	wrapper := filepath.Join(t.TempDir(), "rpm-ostree")
	script := "#!/bin/sh\nfor a; do shift; [ \"$a\" = revision=" + chosen + " ] && a=revision=" + other +
		"; set -- \"$@\" \"$a\"; done\nexec " + stager.Client.Path + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := *stager.Client
	c.Path = wrapper
	stager.Client, stager.Exact = &c, true
	err := stager.Stage(ctx, state.Target{Checksum: chosen})
	if !errors.Is(err, errStagedNotChosen) || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), "discarded it") {
		t.Fatalf("err = %v, want the other release named and discarded", err)
	}
	st, err := o.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Staged != nil {
		t.Fatalf("staged after the refusal: %+v", st.Staged)
	}
	// Without the rewrite, the chosen release stages.
	stager.Client = o.Client
	if err := stager.Stage(ctx, state.Target{Checksum: chosen}); err != nil {
		t.Fatal(err)
	}
}
