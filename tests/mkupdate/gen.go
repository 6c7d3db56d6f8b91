package main

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// spec says which tree to make. Everything is a pure function of it, so
// generation N of a seed is the same tree on every machine.
type spec struct {
	Seed       uint64  `json:"seed"`
	Size       int64   `json:"size"`
	Files      int     `json:"files"`
	Mutate     float64 `json:"mutate"`
	Generation int     `json:"generation"`
}

// rng returns a generator for one (purpose, file, generation) triple.
func (s spec) rng(purpose string, file, gen int) *rand.Rand {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], s.Seed)
	h.Write(b[:])
	fmt.Fprintf(h, "/%s/%d/%d", purpose, file, gen)
	v := h.Sum64()
	return rand.New(rand.NewPCG(v, v^0x9e3779b97f4a7c15))
}

// sizes is the size of each file: a realistic mix (many small files, some
// of megabytes, a few large ones), scaled to the total. Sizes do not change
// between generations; contents do.
func (s spec) sizes() []int64 {
	raw := make([]float64, s.Files)
	sum := 0.0
	for i := range raw {
		r := s.rng("size", i, 0)
		lo, hi := 1e3, 32e3 // 80%: config, scripts, small libraries
		switch p := r.Float64(); {
		case p > 0.98: // 2%: big binaries, firmware, locale archives
			lo, hi = 2e6, 64e6
		case p > 0.80: // 18%: libraries and executables
			lo, hi = 32e3, 2e6
		}
		raw[i] = math.Exp(math.Log(lo) + r.Float64()*(math.Log(hi)-math.Log(lo)))
		sum += raw[i]
	}
	out := make([]int64, s.Files)
	for i, v := range raw {
		out[i] = int64(v / sum * float64(s.Size))
	}
	return out
}

// lastChange is the generation at which file i last changed, up to gen:
// each generation changes a Mutate fraction of the files.
func (s spec) lastChange(i, gen int) int {
	for g := gen; g > 0; g-- {
		if s.rng("mutate", i, g).Float64() < s.Mutate {
			return g
		}
	}
	return 0
}

func (s spec) path(root string, i int) string {
	return filepath.Join(root, "usr", "share", "mkupdate", fmt.Sprintf("%03d", i/100), fmt.Sprintf("%05d.bin", i))
}

// writeFile writes file i's content as of generation contentGen: part random
// (incompressible, like machine code) and part repetitive (like tables and
// strings), so archive repos compress it as they would an OS tree.
func (s spec) writeFile(root string, i int, size int64, contentGen int) error {
	p := s.path(root, i)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	r := s.rng("content", i, contentGen)
	buf := make([]byte, 64<<10)
	pattern := []byte(strings.Repeat("mkupdate file "+strconv.Itoa(i)+" generation "+strconv.Itoa(contentGen)+"\n", 64))
	for left := size; left > 0; {
		n := int64(len(buf))
		if left < n {
			n = left
		}
		split := len(buf) * 6 / 10 // the rest, ~40%, is repetitive
		for j := 0; j+8 <= split; j += 8 {
			binary.LittleEndian.PutUint64(buf[j:], r.Uint64())
		}
		for k := split; k < len(buf); k += copy(buf[k:], pattern) {
		}
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
		left -= n
	}
	return f.Close()
}
