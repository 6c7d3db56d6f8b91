package guard

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"strconv"
	"strings"

	"github.com/update-agent/update-agent/agent/iocost"
)

// Under iocost the kernel keeps its own books: every cgroup's io.stat
// line of a disk carries cost.usage, the device time (µs, at the vrate of
// the moment) its I/O cost as the model prices it, and the root's line
// includes every cgroup's. Usage over wall time is the share of the
// budget used. The model brake reads what everything but the stager used:
// a model scaled below the other tenants' needs throttles them, etcd
// included, and etcd's latency then asks for more cuts (measured: cut to
// 1/16 of the seed within 25 s, etcd and the fio job using 115 % of the
// budget between them, etcd's puts at 1 s, staging stalled for 11 min).

// CostInputs say where iocost's books are: the cgroup2 root's io.stat,
// the stager's cgroups' (a missing one counts nothing: not started yet),
// and the staging disks by "major:minor".
type CostInputs struct {
	Root string
	Own  []string          // at most 64 (CostStat.OwnRead's bits)
	Devs map[string]string // "254:0" -> "vda"

	// Pread is the files' (nil: pread(2); tests inject a removed
	// cgroup's failure).
	Pread func(fd int, p []byte, off int64) (int, error)

	root *KernelFile
	own  []*KernelFile
}

// WithCost returns src with iocost's books added to every reading
// (Reading.Cost); a failure to read them is returned beside the
// reading, as Inputs returns its own. Close closes the books' files.
func WithCost(src Source, c *CostInputs) interface {
	Source
	Close() error
} {
	return &costSource{src: src, c: c}
}

type costSource struct {
	src Source
	c   *CostInputs
}

func (s *costSource) Read(ctx context.Context) (Reading, error) {
	r, err := s.src.Read(ctx)
	var cerr error
	r.Cost, cerr = s.c.read()
	return r, errors.Join(err, cerr)
}

func (s *costSource) Close() error { return s.c.close() }

// CostStat is one disk's books at a reading: cumulative cost.usage (µs)
// of all cgroups and of the stager's, and which of the stager's files
// were read (bit i: CostInputs.Own[i]). A cgroup that appears starts
// from nothing; one gone takes its usage with it.
type CostStat struct {
	Usage, Own uint64
	OwnRead    uint64
	// Vrate is the root's cost.vrate at the reading (percent; 0: not
	// printed).
	Vrate float64
}

func (c *CostInputs) close() error {
	var errs []error
	for _, f := range append([]*KernelFile{c.root}, c.own...) {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	c.root, c.own = nil, nil
	return errors.Join(errs...)
}

// read returns each disk's books; nil when iocost is not on (no
// cost.usage in the root's lines).
func (c *CostInputs) read() (map[string]CostStat, error) {
	if c == nil || c.Root == "" || len(c.Devs) == 0 {
		return nil, nil
	}
	if c.root == nil {
		c.root = &KernelFile{Path: c.Root, Pread: c.Pread}
		for _, p := range c.Own {
			c.own = append(c.own, &KernelFile{Path: p, Pread: c.Pread})
		}
	}
	b, err := c.root.Read()
	if err != nil {
		return nil, err
	}
	total, vrates := parseCost(string(b))
	out := map[string]CostStat{}
	for dev, disk := range c.Devs {
		if u, ok := total[dev]; ok {
			out[disk] = CostStat{Usage: u, Vrate: vrates[dev]}
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	for i, f := range c.own {
		b, err := f.Read()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		own := ParseCostUsage(string(b))
		for dev, disk := range c.Devs {
			if st, ok := out[disk]; ok {
				st.Own += own[dev]
				st.OwnRead |= 1 << i
				out[disk] = st
			}
		}
	}
	return out, nil
}

// ParseCostUsage reads cost.usage per "major:minor" from an io.stat.
func ParseCostUsage(s string) map[string]uint64 {
	m, _ := parseCost(s)
	return m
}

// parseCost reads cost.usage and cost.vrate (the root's lines alone
// print it; iocost.ParseVrates, as the window's learning reads it) per
// "major:minor".
func parseCost(s string) (usage map[string]uint64, vrate map[string]float64) {
	usage = map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		for _, kv := range f[1:] {
			if v, ok := strings.CutPrefix(kv, "cost.usage="); ok {
				if n, err := strconv.ParseUint(v, 10, 64); err == nil {
					usage[f[0]] = n
				}
			}
		}
	}
	return usage, iocost.ParseVrates(s)
}

// othersShare is the largest share of a disk's iocost budget that
// everything but the stager used between two readings (-1: unknown).
func othersShare(old, cur map[string]CostStat, seconds float64) float64 {
	share := -1.0
	if seconds <= 0 {
		return share
	}
	for disk, c := range cur {
		o, ok := old[disk]
		// A stager's cgroup gone between the two: unknown.
		if !ok || o.OwnRead&^c.OwnRead != 0 || c.Usage < o.Usage || c.Own < o.Own {
			continue
		}
		du, down := float64(c.Usage-o.Usage), float64(c.Own-o.Own)
		share = max(share, max(du-down, 0)/(seconds*1e6))
	}
	return share
}
