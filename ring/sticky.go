package ring

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Owned is a target's load and the node that scrapes it as primary now (its
// publisher; "" when unknown): NewSticky's input.
type Owned struct {
	Load
	Owner string
}

// NewSticky places targets on r with bounded loads, as NewBounded does, but
// starting from where they are: a target stays with its current owner
// (Owned.Owner) while that owner stays within the bound, so that a join or a
// leave moves little more than what the joiner takes or the leaver leaves.
// NewBounded places from scratch each time, and each placement is a
// function of the ring and the weights alone: at 100 nodes a join or leave
// moved about twice 1/N of the samples there, because a heavy target
// leaving a full node let the light ones that had overflowed from it come
// back, and every full node shed light targets when the mean shifted.
//
// The primary owners are placed in four steps; each goes over the targets
// the earlier steps left, heaviest first (by weight class) and by key
// within a class, as in NewBounded:
//
//  1. keep: a target whose current owner is its plain-ring owner (its
//     home) stays there while the home's load stays within the limit
//     (c × the mean);
//  2. pull: a target goes home while the home stays below the mean (a
//     joiner fills up with its share; the targets of a node that left go
//     to their new home);
//  3. stay: a target stays with its current owner while that owner stays
//     within the limit;
//  4. walk: a target goes to the first node clockwise from its key whose
//     load stays below (1+c)/2 × the mean, else to the first within the
//     limit, else to the least loaded node.
//
// When that leaves a node above the limit (a target fits nowhere because
// lighter ones kept their places first), the placement is NewBounded's
// from scratch instead; placed again from its owners, the next one starts
// from there.
//
// Filling by walking only to halfway between the mean and the limit
// leaves most nodes below the limit, so a join (the mean, and with it the
// limit, drops by 1/N) sheds little. The replicas (ranks 1 to rf-1) are
// placed after every primary, by the same walk, on distinct nodes; they
// do not stay where they were (their owners publish nothing).
//
// A key given twice (two nodes publish it while it changes hands) keeps
// its largest weight, and counts as owned by its home if the home is one
// of the owners given, else by the first of them by name. Owners that are
// not on r count as none. The result depends only on the ring and the set
// of (key, weight, owner) triples, never on their order. Placing the
// result again (each target's primary as its owner) gives the same
// owners.
func NewSticky(r *Ring, targets []Owned, c float64, rf int) *Bounded {
	b, c, rf := emptyBounded(r, c, rf)
	if r.Len() == 0 {
		return b
	}
	in := stickyInput(r, targets)
	ts, owner := in.ts, in.owner
	mean := b.size(ts, c, rf) / float64(r.Len()) // of the primaries
	order := heaviestFirst(ts)
	p := stickyPass{b: b, home: in.home, mean: mean, fill: (1 + c) / 2 * mean, limit: c * mean}
	// Each step goes over what the earlier ones left, in order. Taking the
	// steps one after the other, rather than every step for one target
	// before the next, makes the result a fixed point: placed again from
	// its own owners, a target it pulled home is kept there, one it left
	// with its owner stays, one it walked stays where it went, and each
	// step finds the loads it found before.
	rest := order
	for _, step := range []func(int32, Load, int32) bool{p.keep, p.pull, p.stay} {
		next := rest[:0:0]
		for _, i := range rest {
			if !step(i, ts[i], owner[i]) {
				next = append(next, i)
			}
		}
		rest = next
	}
	for _, i := range rest {
		p.put(i, ts[i].Weight, p.walk(ts[i], nil))
	}
	if slices.Max(b.load) > p.limit {
		// A target fits nowhere: its owners and homes hold lighter
		// targets that kept their places first (when the weights are
		// first published, every target's owner is its home). From
		// scratch, the heaviest go first; placed again from that
		// placement's owners, the next placement keeps them.
		return NewBounded(r, in.all, c, b.rf)
	}
	p.fill, p.limit = (1+c)/2*float64(rf)*mean, b.limit
	for k := 1; k < rf; k++ {
		for _, i := range order {
			o := b.owners[int(i)*b.rf : int(i)*b.rf+k+1]
			o[k] = p.walk(ts[i], o[:k])
			b.load[o[k]] += ts[i].Weight
		}
	}
	return b
}

// stickyInput is NewSticky's input normalised as NewBounded normalises
// its own (validWeights; one entry per key, with its largest weight):
// ts sorted by key, and per entry its home (plain-ring owner) and current
// owner as node indexes of r (-1: none); all is every target's load, for
// NewBounded.
type stickyIn struct {
	ts          []Load
	home, owner []int32
	all         []Load
}

func stickyInput(r *Ring, targets []Owned) stickyIn {
	in := stickyIn{all: make([]Load, len(targets))}
	for i, t := range targets {
		in.all[i] = t.Load
	}
	validWeights(in.all)
	idx := make([]int32, len(targets))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(x, y int32) int {
		if c := cmp.Compare(in.all[x].Key, in.all[y].Key); c != 0 {
			return c
		}
		return cmp.Compare(in.all[y].Weight, in.all[x].Weight)
	})
	for i := 0; i < len(idx); {
		j := i + 1
		for j < len(idx) && in.all[idx[j]].Key == in.all[idx[i]].Key {
			j++
		}
		l := in.all[idx[i]]
		home := r.owner[r.search(l.Key)]
		in.ts = append(in.ts, l)
		in.home = append(in.home, home)
		in.owner = append(in.owner, currentOwner(r, home, targets, idx[i:j]))
		i = j
	}
	return in
}

// currentOwner picks, among the owners given for one key (targets[at]),
// its home if present, else the first by name (node indexes follow the
// sorted names).
func currentOwner(r *Ring, home int32, targets []Owned, at []int32) int32 {
	best := int32(-1)
	for _, i := range at {
		if targets[i].Owner == "" {
			continue
		}
		o, ok := slices.BinarySearch(r.nodes, targets[i].Owner)
		switch {
		case !ok:
		case int32(o) == home:
			return home
		case best < 0 || int32(o) < best:
			best = int32(o)
		}
	}
	return best
}

// validWeights replaces non-positive and non-finite weights by the mean of
// the valid ones (1 when there are none).
func validWeights(ts []Load) {
	valid, cnt := 0.0, 0
	for _, t := range ts {
		if t.Weight > 0 && !math.IsInf(t.Weight, 0) {
			valid += t.Weight
			cnt++
		}
	}
	def := 1.0
	if cnt > 0 {
		def = valid / float64(cnt)
	}
	for i := range ts {
		if !(ts[i].Weight > 0) || math.IsInf(ts[i].Weight, 0) {
			ts[i].Weight = def
		}
	}
}

// heaviestFirst orders the indexes of ts (sorted by key) by weight class,
// heaviest first, then by key.
func heaviestFirst(ts []Load) []int32 {
	order := make([]int32, len(ts))
	class := make([]int, len(ts))
	for i, t := range ts {
		order[i] = int32(i)
		class[i] = weightClass(t.Weight)
	}
	slices.SortFunc(order, func(x, y int32) int {
		if c := cmp.Compare(class[y], class[x]); c != 0 {
			return c
		}
		return cmp.Compare(x, y)
	})
	return order
}

// stickyPass places primaries: mean, fill and limit are per node, of the
// primaries' load.
type stickyPass struct {
	b                 *Bounded
	home              []int32 // per target: its plain-ring owner
	mean, fill, limit float64
}

func (p *stickyPass) put(i int32, w float64, o int32) {
	p.b.owners[int(i)*p.b.rf] = o
	p.b.load[o] += w
}

// keep places target i at its home if it is there already and fits.
func (p *stickyPass) keep(i int32, t Load, cur int32) bool {
	h := p.home[i]
	if cur != h || p.b.load[h]+t.Weight > p.limit {
		return false
	}
	p.put(i, t.Weight, h)
	return true
}

// pull places target i at its home while the home stays below the mean.
func (p *stickyPass) pull(i int32, t Load, _ int32) bool {
	h := p.home[i]
	if p.b.load[h]+t.Weight > p.mean {
		return false
	}
	p.put(i, t.Weight, h)
	return true
}

// stay places target i with its current owner while that fits.
func (p *stickyPass) stay(i int32, t Load, cur int32) bool {
	if cur < 0 || p.b.load[cur]+t.Weight > p.limit {
		return false
	}
	p.put(i, t.Weight, cur)
	return true
}

// walk returns the first node clockwise from t's key, not in have, whose
// load with t stays within fill; else the first within limit; else the
// least loaded node not in have (the first by name on a tie).
func (p *stickyPass) walk(t Load, have []int32) int32 {
	load := p.b.load
	within := int32(-1)
	for o := range p.b.ring.clockwise(t.Key) {
		if slices.Contains(have, o) {
			continue
		}
		switch l := load[o] + t.Weight; {
		case l <= p.fill:
			return o
		case within < 0 && l <= p.limit:
			within = o
		}
	}
	if within >= 0 {
		return within
	}
	best := int32(-1)
	for o := range int32(len(load)) {
		if !slices.Contains(have, o) && (best < 0 || load[o] < load[best]) {
			best = o
		}
	}
	return best
}

// Digest identifies the placement by its result: the nodes and every
// placed key's owners. Two placements built from different inputs that
// place every key on the same owners have the same digest.
func (b *Bounded) Digest() uint64 {
	var d xxhash.Digest
	d.Reset()
	if b == nil {
		return d.Sum64()
	}
	for _, n := range b.ring.Nodes() {
		_, _ = d.WriteString(n)
		_, _ = d.WriteString("\xff")
	}
	var buf [8]byte
	for i, k := range b.keys {
		binary.LittleEndian.PutUint64(buf[:], k)
		_, _ = d.Write(buf[:])
		for _, o := range b.owners[i*b.rf : (i+1)*b.rf] {
			binary.LittleEndian.PutUint32(buf[:4], uint32(o))
			_, _ = d.Write(buf[:4])
		}
	}
	return d.Sum64()
}
