package txn

import (
	"testing"

	"github.com/update-agent/update-agent/agent/rpmostree"
)

func TestDecideForeign(t *testing.T) {
	tx := func(method, path string) *rpmostree.Transaction {
		return &rpmostree.Transaction{Method: method, Sender: ":1.42", Path: path}
	}
	a := "/org/projectatomic/rpmostree1/fedora"
	for _, c := range []struct {
		name          string
		active, paced *rpmostree.Transaction
		want          ForeignStep
	}{
		{"idle", nil, nil, ForeignIdle},
		{"zincati's deploy", tx("Deploy", a), nil, ForeignOpen},
		{"an admin's upgrade", tx("Upgrade", a), nil, ForeignOpen},
		{"the MCO's rebase", tx("Rebase", a), nil, ForeignOpen},
		{"upgrade with options", tx("UpdateDeployment", a), nil, ForeignOpen},
		{"install", tx("PkgChange", a), nil, ForeignOpen},
		{"kargs", tx("KernelArgs", a), nil, ForeignOpen},
		{"automatic update", tx("AutomaticUpdateTrigger", a), nil, ForeignOpen},
		{"finalize is not staging", tx("FinalizeDeployment", a), nil, ForeignIdle},
		{"rollback writes nothing", tx("Rollback", a), nil, ForeignIdle},
		{"cleanup", tx("Cleanup", a), nil, ForeignIdle},
		{"refresh-md", tx("RefreshMd", a), nil, ForeignIdle},
		{"still running", tx("Deploy", a), tx("Deploy", a), ForeignKeep},
		{"gone", nil, tx("Deploy", a), ForeignClose},
		{"another took its place", tx("PkgChange", a), tx("Deploy", a), ForeignClose},
		{"another sender", &rpmostree.Transaction{Method: "Deploy", Sender: ":1.99", Path: a}, tx("Deploy", a), ForeignClose},
	} {
		if got := DecideForeign(c.active, c.paced); got != c.want {
			t.Errorf("%s: DecideForeign = %s, want %s", c.name, got, c.want)
		}
	}
}
