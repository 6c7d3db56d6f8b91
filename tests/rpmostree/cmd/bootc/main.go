// Command bootc is the test stand-in for bootc on an image-mode host: the
// CLI contract the agent uses (status JSON, upgrade --check,
// --download-only, --from-downloaded --apply) over the rpm-ostree
// stand-in's deployments. See tests/rpmostree/README.md.
package main

import (
	"os"

	"github.com/update-agent/update-agent/tests/rpmostree/standin"
)

func main() {
	os.Exit(standin.BootcMain(os.Args[1:], os.Stdout, os.Stderr))
}
