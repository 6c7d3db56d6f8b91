package iocost

import (
	"slices"
	"strconv"
)

// Mode is staging.iocost: which staging disks a window puts iocost on.
// The stager and doctor decide it with the same functions (Disks,
// MemoryAllowance), so doctor says what the stager does.
type Mode uint8

const (
	// Off: never; the write rate loop paces staging.
	Off Mode = iota
	// On: every staging disk, with the operator's model, else the one
	// learned on the disk, else the seed (learn.go).
	On
	// WithModel: only the disks staging.iocost_models gives a model for.
	WithModel
	// Auto: On where the staging paths' journal orders data (ext3/ext4
	// data=ordered or data=journal), WithModel elsewhere. Measured on a
	// 500 IOPS / 20 MB/s disk: learning with an 8M page cache bound held
	// etcd's WAL fsync p99 at x1.80 on ext4 against the rate loop's
	// x17.4, but x4.07 on XFS against the loop's x2.38
	// (tests/bench/results/learn-ext4-200MiB-2, learn-xfs-200MiB-1).
	Auto
)

func (m Mode) String() string {
	switch m {
	case On:
		return "true"
	case WithModel:
		return "with-model"
	case Auto:
		return "auto"
	}
	return "false"
}

// Effective is what mode behaves as in a window whose staging paths'
// journal orders data (ordersData) or not: Auto resolves to On or
// WithModel, the others are themselves.
func Effective(mode Mode, ordersData bool) Mode {
	if mode != Auto {
		return mode
	}
	if ordersData {
		return On
	}
	return WithModel
}

// Disks are the staging disks iocost goes on under mode, before the
// kernel's say (Controller.Available): every disk under On, the ones
// models names under WithModel, none under Off.
func Disks(mode Mode, disks []string, models map[string]Model, ordersData bool) []string {
	switch Effective(mode, ordersData) {
	case On:
		return slices.Clone(disks)
	case WithModel:
		return Modelled(disks, models)
	}
	return nil
}

// Page cache allowances staging.memory_high = "auto" chooses between.
const (
	// MemoryOrdered is the bound in a window iocost paces on a journal
	// that orders data: a commit writes the stager's dirty data first, so
	// less dirty data is shorter commits (x1.80 against 32M's x5.42 with
	// learning on ext4's small disk).
	MemoryOrdered uint64 = 8 << 20
	// MemoryDefault is the bound everywhere else: on XFS the 8M bound
	// with iocost went x4.07 where the rate loop held x2.38.
	MemoryDefault uint64 = 32 << 20
)

// MemoryAllowance is the page cache the window allows the stager and
// the daemon, and why: configured (0: no bound) unless auto, else
// MemoryOrdered where iocost is on (iocostOn) on a journal that orders
// data, MemoryDefault otherwise.
func MemoryAllowance(configured uint64, auto, iocostOn, ordersData bool) (uint64, string) {
	switch {
	case !auto && configured == 0:
		return 0, "staging.memory_high = \"infinity\""
	case !auto:
		return configured, "staging.memory_high"
	case iocostOn && ordersData:
		return MemoryOrdered, "iocost on an ordered journal"
	case iocostOn:
		return MemoryDefault, "iocost on a journal that does not order data"
	case ordersData:
		return MemoryDefault, "no iocost"
	}
	return MemoryDefault, "no iocost, journal does not order data"
}

// FormatMemory writes a page cache bound as staging.memory_high does
// ("8M"), in bytes where it is not whole MiB.
func FormatMemory(b uint64) string {
	if b%(1<<20) == 0 {
		return strconv.FormatUint(b>>20, 10) + "M"
	}
	return strconv.FormatUint(b, 10)
}
