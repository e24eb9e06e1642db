package ring

import (
	"cmp"
	"math"
	"slices"
)

// DefaultLoadBound is the capacity factor c of NewBounded when it is given
// zero: no node carries more than c times the mean load unless a target
// fits nowhere. 1.10 is the largest c that keeps the most loaded of 100
// nodes within 10% of the mean (docs/BENCHMARKS.md, "Placement").
const DefaultLoadBound = 1.10

// Load is a target's key and its weight (the load it brings its owner, for
// shoal samples per second), as published by the target's owner.
type Load struct {
	Key    uint64
	Weight float64
}

// Bounded is a bounded-load placement (consistent hashing with bounded
// loads, Mirrokni, Thorup and Zadimoghaddam) of a set of weighted targets
// on a ring. It is immutable and safe for concurrent use.
//
// Targets are placed one after the other, the heaviest first (by weight
// class, a power of two) and in ascending key order within a class; each
// goes to the first node met walking clockwise from its key (as Owners
// walks) whose load plus the target's weight stays within c × rf × the mean
// load, distinct from the owners it already has; a target that fits nowhere
// goes to the least loaded node it does not have yet. The result depends only on
// the ring and the set of (key, weight) pairs, never on their order, so
// every node that has the same gossiped state computes the same owners.
type Bounded struct {
	ring   *Ring
	rf     int
	keys   []uint64 // sorted, unique
	owners []int32  // rf entries per key, indexes into ring.nodes; -1 none
	load   []float64
	limit  float64
}

// NewBounded places targets on r with capacity factor c (DefaultLoadBound
// when c <= 1) and rf owners per target (1 when rf <= 0; at most the
// number of nodes). A key given twice keeps its largest weight; a
// non-positive or non-finite weight counts as the mean of the valid ones
// (1 when there are none), so that a target whose owner has not measured it
// yet still takes a place.
func NewBounded(r *Ring, targets []Load, c float64, rf int) *Bounded {
	b, c, rf := emptyBounded(r, c, rf)
	if r.Len() == 0 {
		return b
	}
	ts := validSorted(targets)
	ts = slices.CompactFunc(ts, func(a, b Load) bool { return a.Key == b.Key })
	b.size(ts, c, rf)
	// Heavy targets first (by weight class: a power of two), then by key
	// within a class. The heavy ones fill the nodes while there is room
	// everywhere, so when a join or a leave shifts the capacity the
	// overflow that cascades along the order is made of light targets,
	// which move few samples. Classes rather than exact weights keep the
	// order itself from changing with every republished weight.
	order := heaviestFirst(ts)
	for _, i := range order {
		o := b.owners[int(i)*b.rf : int(i)*b.rf+rf]
		for k := range o {
			o[k] = b.place(ts[i], o[:k])
		}
	}
	return b
}

// validSorted returns a copy of targets with valid weights (validWeights),
// sorted by key, the largest weight of a key first.
func validSorted(targets []Load) []Load {
	ts := slices.Clone(targets)
	validWeights(ts)
	slices.SortFunc(ts, func(a, b Load) int {
		if c := cmp.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(b.Weight, a.Weight)
	})
	return ts
}

// emptyBounded is a placement on r with no targets yet, the capacity
// factor c (DefaultLoadBound when c <= 1 or not finite) and the number of
// owners per target (rf: at least 1, at most the nodes) to place with.
func emptyBounded(r *Ring, c float64, rf int) (*Bounded, float64, int) {
	if c <= 1 || math.IsNaN(c) || math.IsInf(c, 0) {
		c = DefaultLoadBound
	}
	rf = max(rf, 1)
	return &Bounded{ring: r, rf: rf}, c, min(rf, max(r.Len(), 1))
}

// size makes room for ts (sorted by key, one entry per key) with no owner
// yet, sets the limit (c × rf × the mean load) and returns the total
// weight of ts.
func (b *Bounded) size(ts []Load, c float64, rf int) float64 {
	total := 0.0
	for _, t := range ts {
		total += t.Weight
	}
	n := b.ring.Len()
	b.limit = c * float64(rf) * total / float64(n)
	b.keys = make([]uint64, len(ts))
	b.owners = make([]int32, len(ts)*b.rf)
	for i := range b.owners {
		b.owners[i] = -1
	}
	b.load = make([]float64, n)
	for i, t := range ts {
		b.keys[i] = t.Key
	}
	return total
}

// weightClass is the binary exponent of w: weights within a factor of two
// share a class.
func weightClass(w float64) int {
	_, exp := math.Frexp(w)
	return exp
}

// place picks the owner of t's next replica given the owners it has.
func (b *Bounded) place(t Load, have []int32) int32 {
	for o := range b.ring.clockwise(t.Key) {
		if slices.Contains(have, o) {
			continue
		}
		if b.load[o]+t.Weight <= b.limit {
			b.load[o] += t.Weight
			return o
		}
	}
	// Nobody has room: the least loaded node, the first by name on a tie.
	best := int32(-1)
	for o := range int32(len(b.load)) {
		if slices.Contains(have, o) {
			continue
		}
		if best < 0 || b.load[o] < b.load[best] {
			best = o
		}
	}
	b.load[best] += t.Weight
	return best
}

// Owners appends to buf[:0] the first n owners of key, primary first, and
// returns it: the same signature as Ring.Owners, so that a consumer can
// take either through one interface. A placed key has the rf owners it was
// placed on (n above rf gives rf). A key that was not among the placed
// targets (a target nobody has published a weight for yet) gets the plain
// ring's owners, r.Owners(key, n), so that it still has an owner who can
// measure and publish it.
func (b *Bounded) Owners(key uint64, n int, buf []string) []string {
	buf = buf[:0]
	if b == nil || b.ring.Len() == 0 || n <= 0 {
		return buf
	}
	i, ok := slices.BinarySearch(b.keys, key)
	if !ok {
		return b.ring.Owners(key, n, buf)
	}
	for _, o := range b.owners[i*b.rf : (i+1)*b.rf] {
		if o >= 0 && len(buf) < n {
			buf = append(buf, b.ring.nodes[o])
		}
	}
	return buf
}

// Len returns the number of nodes, as Ring.Len.
func (b *Bounded) Len() int {
	if b == nil {
		return 0
	}
	return b.ring.Len()
}

// Nodes returns the node names, sorted, as Ring.Nodes.
func (b *Bounded) Nodes() []string {
	if b == nil {
		return nil
	}
	return b.ring.Nodes()
}

// Primary returns the first owner of key ("" for an empty ring).
func (b *Bounded) Primary(key uint64) string {
	if b == nil || b.ring.Len() == 0 {
		return ""
	}
	i, ok := slices.BinarySearch(b.keys, key)
	if !ok {
		return b.ring.Primary(key)
	}
	return b.ring.nodes[b.owners[i*b.rf]]
}

// Placed reports whether key was among the placed targets.
func (b *Bounded) Placed(key uint64) bool {
	if b == nil {
		return false
	}
	_, ok := slices.BinarySearch(b.keys, key)
	return ok
}

// Load returns the weight placed on node (all its replicas), 0 when it is
// not on the ring.
func (b *Bounded) Load(node string) float64 {
	if b == nil {
		return 0
	}
	i, ok := slices.BinarySearch(b.ring.Nodes(), node)
	if !ok {
		return 0
	}
	return b.load[i]
}

// Limit returns the capacity every node was held to: c × rf × the mean.
func (b *Bounded) Limit() float64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// Ring returns the ring the targets were placed on.
func (b *Bounded) Ring() *Ring {
	if b == nil {
		return nil
	}
	return b.ring
}

// WeightPolicy turns what an owner measures of a target into the weight
// it publishes for NewBounded. It is pure: the owner keeps an Estimate and
// the published weight per target, calls Smooth on every measurement
// (every scrape, or once per update period) and Publish once per update
// period. Zero fields mean the values of DefaultWeightPolicy.
type WeightPolicy struct {
	// Smoothing is the weight of a new measurement in the exponentially
	// weighted moving average, in (0, 1]. The first 1/Smoothing
	// measurements are averaged plainly, so a young estimate is not just
	// its first sample.
	Smoothing float64
	// Tolerance is the hysteresis: the published weight changes only when
	// the estimate leaves published × (1 ± Tolerance). Every change of a
	// published weight can move targets, so the band is wide enough that
	// ordinary noise (±20% from scrape to scrape) never crosses it, while a
	// real change of size (a target doubling) does.
	Tolerance float64
	// MinSamples is how many measurements an estimate needs before it is
	// published for a target that has no published weight yet.
	MinSamples int
}

// DefaultWeightPolicy returns the policy chosen from the simulation in
// bench/sim.
func DefaultWeightPolicy() WeightPolicy {
	return WeightPolicy{Smoothing: 0.1, Tolerance: 0.3, MinSamples: 10}
}

func (p WeightPolicy) withDefaults() WeightPolicy {
	d := DefaultWeightPolicy()
	if !(p.Smoothing > 0 && p.Smoothing <= 1) {
		p.Smoothing = d.Smoothing
	}
	if !(p.Tolerance > 0) || math.IsInf(p.Tolerance, 0) {
		p.Tolerance = d.Tolerance
	}
	if p.MinSamples <= 0 {
		p.MinSamples = d.MinSamples
	}
	return p
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// Estimate is an owner's smoothed measurement of one target. The zero value
// is an estimate with no measurement: an owner starts from it when it takes
// a target over.
type Estimate struct {
	Value   float64
	Samples int
}

// Smooth folds one measurement into e and returns the new estimate. A
// negative or non-finite measurement is ignored.
func (p WeightPolicy) Smooth(e Estimate, measured float64) Estimate {
	p = p.withDefaults()
	if measured < 0 || !finite(measured) {
		return e
	}
	if e.Samples <= 0 || !finite(e.Value) {
		return Estimate{Value: measured, Samples: 1}
	}
	alpha := max(p.Smoothing, 1/float64(e.Samples+1))
	return Estimate{Value: e.Value + alpha*(measured-e.Value), Samples: e.Samples + 1}
}

// Publish returns the weight to publish for a target whose published
// weight is published (0: none yet). With nothing published it returns
// e's value once e has MinSamples measurements (0 before). Otherwise it
// keeps published while e stays within published × (1 ± Tolerance) and
// returns e's value once it leaves that band. An owner that takes a target
// over keeps the weight last published for it (it is in the gossiped
// state) while its own estimate is young, so a hand-off alone never
// changes a weight.
func (p WeightPolicy) Publish(published float64, e Estimate) float64 {
	p = p.withDefaults()
	if !(published > 0) || !finite(published) {
		published = 0
	}
	if e.Samples <= 0 || e.Value < 0 || !finite(e.Value) {
		return published
	}
	if published == 0 {
		if e.Samples >= p.MinSamples {
			return e.Value
		}
		return 0
	}
	if e.Samples >= p.MinSamples && math.Abs(e.Value/published-1) > p.Tolerance {
		return e.Value
	}
	return published
}
