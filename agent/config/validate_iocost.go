package config

import (
	"fmt"

	"github.com/update-agent/update-agent/agent/iocost"
)

func (k *checker) iocost(c *Staging) {
	seen := map[string]int{}
	for i, m := range c.IOCostModels {
		key := fmt.Sprintf("staging.iocost_models[%d]", i)
		disk, _, err := iocost.ParseDiskModel(m)
		if err != nil {
			k.fail(key, "%v", err)
			continue
		}
		if j, dup := seen[disk]; dup {
			k.fail(key, "a second model for %s (first at iocost_models[%d])", disk, j)
		}
		seen[disk] = i
	}
	if len(c.IOCostModels) > 0 && c.IOCost == IOCostOff {
		k.warn("staging.iocost_models", "ignored while staging.iocost is false")
	}
	k.nonNegative("staging.iocost_latency_target", c.IOCostLatencyTarget)
	k.positive("staging.iocost_default_latency_target", c.IOCostDefaultLatencyTarget)
	if c.IOCostPercentile <= 0 || c.IOCostPercentile > 100 {
		k.fail("staging.iocost_percentile", "must be > 0 and <= 100, got %v", c.IOCostPercentile)
	}
	if c.IOCostVrateMin <= 0 || c.IOCostVrateMin > 10000 {
		k.fail("staging.iocost_vrate_min", "must be > 0 and <= 10000 (percent), got %v", c.IOCostVrateMin)
	}
	if c.IOCostVrateMax < c.IOCostVrateMin || c.IOCostVrateMax > 10000 {
		k.failRel("staging.iocost_vrate_max", []string{"staging.iocost_vrate_min"}, "must be >= iocost_vrate_min (%v) and <= 10000 (percent), got %v", c.IOCostVrateMin, c.IOCostVrateMax)
	}
	k.intRange("staging.iocost_io_weight", c.IOCostIOWeight, 1, 10000)
	if c.IOCostEtcdIOWeight > 10000 {
		k.fail("staging.iocost_etcd_io_weight", "must be 1-10000 or \"auto\", got %d", c.IOCostEtcdIOWeight)
	}
}
