package ring

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// NewSticky places targets on r with bounded loads, as NewBounded does, but
// starting from where they are: a target stays with its current owner
// (Load.Owner) while that owner stays within the bound, so that a join or a
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
func NewSticky(r *Ring, targets []Load, c float64, rf int) *Bounded {
	b, c, rf := emptyBounded(r, c, rf)
	if r.Len() == 0 {
		return b
	}
	ts, owner := stickyInput(r, targets)
	mean := b.size(ts, c, rf) / float64(r.Len()) // of the primaries
	order := heaviestFirst(ts)
	p := stickyPass{b: b, mean: mean, fill: (1 + c) / 2 * mean, limit: c * mean}
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
		return NewBounded(r, targets, c, b.rf)
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

// stickyInput normalises targets as NewBounded does (sorted by key, one
// entry per key with its largest weight, invalid weights as the mean of
// the valid ones) and returns each key's current owner as a node index of
// r, -1 for none.
func stickyInput(r *Ring, targets []Load) ([]Load, []int32) {
	ts := validSorted(targets)
	out := ts[:0]
	var owner []int32
	for i := 0; i < len(ts); {
		j := i + 1
		for j < len(ts) && ts[j].Key == ts[i].Key {
			j++
		}
		// out shares ts's array: read the owners before overwriting.
		owner = append(owner, currentOwner(r, ts[i].Key, ts[i:j]))
		out = append(out, Load{Key: ts[i].Key, Weight: ts[i].Weight})
		i = j
	}
	return out, owner
}

// currentOwner picks, among the owners given for one key, its home if
// present, else the first by name (node indexes follow the sorted names).
func currentOwner(r *Ring, key uint64, given []Load) int32 {
	home := r.owner[r.search(key)]
	best := int32(-1)
	for _, l := range given {
		if l.Owner == "" {
			continue
		}
		o, ok := slices.BinarySearch(r.nodes, l.Owner)
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
	mean, fill, limit float64
}

func (p *stickyPass) home(key uint64) int32 {
	return p.b.ring.owner[p.b.ring.search(key)]
}

func (p *stickyPass) put(i int32, w float64, o int32) {
	p.b.owners[int(i)*p.b.rf] = o
	p.b.load[o] += w
}

// keep places target i at its home if it is there already and fits.
func (p *stickyPass) keep(i int32, t Load, cur int32) bool {
	h := p.home(t.Key)
	if cur != h || p.b.load[h]+t.Weight > p.limit {
		return false
	}
	p.put(i, t.Weight, h)
	return true
}

// pull places target i at its home while the home stays below the mean.
func (p *stickyPass) pull(i int32, t Load, _ int32) bool {
	h := p.home(t.Key)
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
