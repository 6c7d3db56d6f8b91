// Command rpm-ostree is the test stand-in for rpm-ostree: the CLI, the daemon
// (`rpm-ostree start-daemon`, what rpm-ostreed.service runs) and the shutdown
// hook (`rpm-ostree standin-finalize-staged`). See tests/rpmostree/README.md.
package main

import (
	"os"

	"github.com/update-agent/update-agent/tests/rpmostree/standin"
)

func main() {
	os.Exit(standin.Main(os.Args[1:], os.Stdout, os.Stderr))
}
