package rpmostree

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// BootedOverrideFile is where Fedora CoreOS's ostree->OCI migration writes
// the deployment the update agent should take for the booted one: the OCI
// image it is to move to, so that the next update comes from the OCI graph
// and is staged by rebasing to the image (zincati's
// BOOTED_STATUS_OVERRIDE_FILE, src/rpm_ostree/cli_status.rs;
// fedora-coreos-tracker#1823).
const BootedOverrideFile = "/run/zincati/booted-status-override.json"

// WithBootedOverride is st with its booted deployment replaced by the one
// in the file at path, as zincati's invoke_cli_status does: the other
// deployments stay (they tell a rollback and a staged deployment). st
// itself when there is no such file; an unreadable or malformed file is an
// error, as in zincati (the migration meant something: guessing would
// stage from the wrong graph).
func WithBootedOverride(st *Status, path string) (*Status, error) {
	if path == "" {
		return st, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the booted status override: %w", err)
	}
	var d Deployment
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("parsing the booted status override %s: %w", path, err)
	}
	out := *st
	out.Deployments = make([]Deployment, len(st.Deployments))
	for i, o := range st.Deployments {
		if o.Booted {
			// zincati takes the file's deployment as it is; the booted
			// flag is kept so that it is still found as the booted one.
			o, o.Booted = d, true
		}
		out.Deployments[i] = o
	}
	return &out, nil
}
