package iocost

import "math"

// The kernel keeps a disk's vrate from one enable to the next: blk-iocost
// resets it only when the device class it picks its defaults by changes
// (ioc_refresh_params_disk, on autop_idx), not on a new io.cost.qos or
// io.cost.model, nor on enable=0. A second window in the same boot starts
// at the vrate the first one ended at, times its own model: measured in
// the bench, a window started at 174.61 % and never moved from it, and a
// learned model (already the first window's model times its vrate) would
// count the vrate twice. Rebase puts the window's effective rate back on
// its model: the model over the carried vrate, its bounds times it, so
// the kernel's vrate x the model is the plan's at the start and the
// bounds allow the plan's own range.

// CarriedVrate is how far from 100 % a vrate found at the window's start
// must be to rebase for it (the kernel prints two decimals).
const CarriedVrate = 0.5

// Rebase returns p for a disk whose kernel has vrate carried (percent)
// from an earlier enable; p as it is when the kernel is at 100 %, p has no
// model of the agent's, or carried is unknown (<= 0).
func Rebase(p DiskPlan, carried float64) DiskPlan {
	if p.Model == nil || carried <= 0 || math.Abs(carried-100) < CarriedVrate {
		return p
	}
	m := p.Model.Scale(100 * 100 / carried)
	p.Model = &m
	f := carried / 100
	// The kernel takes 1-10000 %.
	p.QoS.Min = min(max(p.QoS.Min*f, 1), 10000)
	p.QoS.Max = min(max(p.QoS.Max*f, p.QoS.Min), 10000)
	return p
}
