package doctor

import (
	"strings"

	"github.com/update-agent/update-agent/agent/iocost"
)

// ioWeights says which cgroups the staging window w weights and how: the
// same decision (iocost.WindowWeights) as the stager's journal line
// "iocost weights for the staging window", so the two cannot disagree.
func (d Doctor) ioWeights(w window) Result {
	unit := d.In.StagingUnit
	if d.In.companionMode() {
		unit = "" // another updater's transactions: the daemon alone
	}
	on := len(w.cost) > 0
	etcd, why := iocost.EtcdWeight(d.In.IOCostEtcdIOWeight, len(w.ordered) > 0)
	ww := iocost.WindowWeights(on, unit, d.In.DaemonUnit, d.In.IOWeight, d.In.IOCostIOWeight, d.In.LocalUnit, etcd)
	var detail string
	switch {
	case on:
		detail = "under iocost on " + strings.Join(w.cost, ", ") + ": " + ww.String() +
			" (staging.iocost_io_weight; etcd.local_unit's from staging.iocost_etcd_io_weight, " + why + ")"
		if !ww.EtcdRaised() && d.In.LocalUnit == "" && etcd > 0 {
			detail += "; etcd.local_unit is unset, so staging.iocost_etcd_io_weight goes nowhere"
		}
	default:
		detail = "no iocost in the window (see pacing): " + ww.String() +
			" (staging.io_weight; without iocost only the bfq scheduler honours it)"
	}
	return Result{Check: "io weights", OK: true, Detail: detail}
}
