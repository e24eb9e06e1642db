package ring

import (
	"cmp"
	"maps"
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
// Every target starts on the plain ring's owners (Ring.Owners). A node
// whose load then exceeds c × rf × the mean sheds just enough replicas to
// come within it, the lightest weight class (a power of two) first, in an
// order fixed by a hash of the key within a class. The shed replicas are
// placed the heaviest class first and in key order within a class, each on
// the first node met walking clockwise from its key whose load plus the
// target's weight stays within the limit, distinct from the owners it
// already has; one that fits nowhere goes to the least loaded node it does
// not have yet. A node under the limit therefore keeps exactly its ring
// targets, and a join or a leave moves, beyond what the ring moves, only
// the few replicas at the edge of a node's shed set (docs/BENCHMARKS.md,
// "Placement designs"). The result depends only on the ring and the set of
// (key, weight) pairs, never on their order, so every node that has the
// same gossiped state computes the same owners.
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
	if c <= 1 || math.IsNaN(c) || math.IsInf(c, 0) {
		c = DefaultLoadBound
	}
	rf = max(rf, 1)
	b := &Bounded{ring: r, rf: rf}
	n := r.Len()
	if n == 0 {
		return b
	}
	rf = min(rf, n)

	ts := cleanLoads(targets)

	total := 0.0
	for _, t := range ts {
		total += t.Weight
	}
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
	b.ringOwners(ts, rf)
	b.placeShed(ts, rf, b.shed(ts, rf))
	return b
}

// cleanLoads returns targets sorted by key, a key given twice with its
// largest weight, and a non-positive or non-finite weight replaced by the
// mean of the valid ones (1 when there are none).
func cleanLoads(targets []Load) []Load {
	ts := slices.Clone(targets)
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
	// By key, the largest weight first, so Compact keeps it.
	slices.SortFunc(ts, func(a, b Load) int {
		if c := cmp.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(b.Weight, a.Weight)
	})
	ts = slices.CompactFunc(ts, func(a, b Load) bool { return a.Key == b.Key })
	return ts
}

// slot is one replica of target i: its rank among the target's owners.
type slot struct{ i, rank int32 }

// ringOwners gives every target the plain ring's rf owners and counts
// their loads.
func (b *Bounded) ringOwners(ts []Load, rf int) {
	r := b.ring
	for i, t := range ts {
		o := b.owners[i*b.rf : i*b.rf+rf]
		j, k := r.search(t.Key), 0
		for steps := 0; steps < len(r.tokens) && k < rf; steps++ {
			if x := r.owner[j]; !slices.Contains(o[:k], x) {
				o[k] = x
				k++
			}
			if j++; j == len(r.tokens) {
				j = 0
			}
		}
		for _, x := range o {
			b.load[x] += t.Weight
		}
	}
}

// shed takes off every node above the limit just enough replicas to bring
// it within, the lightest weight class first and in an order fixed by a
// hash of the key within a class, and returns them (their owner set to -1).
//
// Why this order moves few samples when a node joins or leaves: a node's
// shed replicas are a prefix of its own fixed order, so a small change of
// its load or of the limit sheds or takes back only a few light replicas
// at the end of the prefix, and a node under the limit keeps exactly the
// plain ring's targets. The order is hashed rather than by key so that the
// prefix is not one stretch of the ring that a joining node's tokens would
// cut into.
func (b *Bounded) shed(ts []Load, rf int) []slot {
	n := len(b.load)
	mine := make([][]slot, n)
	for i := range ts {
		for k := range rf {
			if b.load[b.owners[i*b.rf+k]] > b.limit {
				o := b.owners[i*b.rf+k]
				mine[o] = append(mine[o], slot{int32(i), int32(k)})
			}
		}
	}
	var shed []slot
	for o, es := range mine {
		if len(es) == 0 {
			continue
		}
		sortShedOrder(ts, es)
		for _, e := range es {
			if b.load[o] <= b.limit {
				break
			}
			b.load[o] -= ts[e.i].Weight
			b.owners[int(e.i)*b.rf+int(e.rank)] = -1
			shed = append(shed, e)
		}
	}
	return shed
}

// sortShedOrder sorts replicas in the order a node sheds them: the
// lightest weight class first, then by shedRank.
func sortShedOrder(ts []Load, es []slot) {
	slices.SortFunc(es, func(x, y slot) int {
		if c := cmp.Compare(weightClass(ts[x.i].Weight), weightClass(ts[y.i].Weight)); c != 0 {
			return c
		}
		if c := cmp.Compare(shedRank(ts[x.i].Key), shedRank(ts[y.i].Key)); c != 0 {
			return c
		}
		return cmp.Compare(x.rank, y.rank)
	})
}

// shedRank orders a node's targets for shedding: a mix of the key, so that
// the order is unrelated to the key's position on the ring.
func shedRank(key uint64) uint64 {
	key ^= key >> 33
	key *= 0xff51afd7ed558ccd
	key ^= key >> 33
	key *= 0xc4ceb9fe1a85ec53
	key ^= key >> 33
	return key
}

// weightClass is the binary exponent of w: weights within a factor of two
// share a class.
func weightClass(w float64) int {
	_, exp := math.Frexp(w)
	return exp
}

// placeShed places the shed replicas, the heaviest class first and in key
// order within a class, each on the first node clockwise from its key with
// room (fits). The heavy ones take the room while there is some. A replica
// that fits nowhere takes the place of lighter replicas on the first node
// clockwise where that makes room (evict), and those are placed again with
// their class; only one that not even that places goes to the least
// loaded node.
func (b *Bounded) placeShed(ts []Load, rf int, shed []slot) {
	byClass := map[int][]slot{}
	for _, e := range shed {
		c := weightClass(ts[e.i].Weight)
		byClass[c] = append(byClass[c], e)
	}
	classes := slices.Sorted(maps.Keys(byClass))
	var (
		have   []int32
		held   [][]slot // per node, built at the first eviction
		budget = len(ts) * rf
	)
	for ci := len(classes) - 1; ci >= 0; ci-- {
		c := classes[ci]
		slices.SortFunc(byClass[c], func(x, y slot) int {
			if c := cmp.Compare(x.i, y.i); c != 0 {
				return c
			}
			return cmp.Compare(x.rank, y.rank)
		})
		// Evictions of this class are appended and placed in turn.
		for k := 0; k < len(byClass[c]); k++ {
			e := byClass[c][k]
			t := ts[e.i]
			have = have[:0]
			for _, o := range b.owners[int(e.i)*b.rf : int(e.i)*b.rf+rf] {
				if o >= 0 {
					have = append(have, o)
				}
			}
			o := b.fits(t, have)
			if o < 0 {
				if held == nil {
					held = b.holdings(ts, rf)
				}
				// Replicas of its own class may make room too (with rf > 1 a
				// replica can be barred from the only node with room), as
				// many times as there are replicas, so that this ends.
				upTo := c - 1
				if budget > 0 {
					upTo = c
				}
				var out []slot
				o, out = b.evict(ts, e, have, held, upTo)
				budget -= len(out)
				for _, x := range out {
					byClass[weightClass(ts[x.i].Weight)] = append(byClass[weightClass(ts[x.i].Weight)], x)
				}
			}
			if o < 0 {
				o = b.leastLoaded(have)
			}
			b.owners[int(e.i)*b.rf+int(e.rank)] = o
			b.load[o] += t.Weight
			if held != nil {
				held[o] = append(held[o], e)
			}
		}
	}
}

// fits returns the first node clockwise from t's key, not in have, whose
// load plus t's weight stays within the limit; -1 if there is none.
func (b *Bounded) fits(t Load, have []int32) int32 {
	r := b.ring
	start := r.search(t.Key)
	for steps := range len(r.tokens) {
		j := start + steps
		if j >= len(r.tokens) {
			j -= len(r.tokens)
		}
		o := r.owner[j]
		if !slices.Contains(have, o) && b.load[o]+t.Weight <= b.limit {
			return o
		}
	}
	return -1
}

// holdings lists every node's replicas.
func (b *Bounded) holdings(ts []Load, rf int) [][]slot {
	held := make([][]slot, len(b.load))
	for i := range ts {
		for k := range rf {
			if o := b.owners[i*b.rf+k]; o >= 0 {
				held[o] = append(held[o], slot{int32(i), int32(k)})
			}
		}
	}
	return held
}

// evict finds the first node clockwise from e's key, not in have, on which
// e fits once replicas of other targets of classes up to upTo leave, the
// lightest class first in shed order; it takes them off (owner -1) and
// returns the node and them. It returns -1 when no node has enough such
// load.
func (b *Bounded) evict(ts []Load, e slot, have []int32, held [][]slot, upTo int) (int32, []slot) {
	r := b.ring
	t := ts[e.i]
	start := r.search(t.Key)
	tried := make([]bool, len(b.load))
	for steps := range len(r.tokens) {
		j := start + steps
		if j >= len(r.tokens) {
			j -= len(r.tokens)
		}
		o := r.owner[j]
		if tried[o] || slices.Contains(have, o) {
			continue
		}
		tried[o] = true
		var movable []slot
		free := 0.0
		for _, x := range held[o] {
			if x.i != e.i && b.owners[int(x.i)*b.rf+int(x.rank)] == o && weightClass(ts[x.i].Weight) <= upTo {
				movable = append(movable, x)
				free += ts[x.i].Weight
			}
		}
		if b.load[o]-free+t.Weight > b.limit {
			continue
		}
		// Those that have somewhere else to go leave first, so that an
		// eviction does not just bar the next replica the same way.
		sortShedOrder(ts, movable)
		slices.SortStableFunc(movable, func(x, y slot) int {
			return cmp.Compare(b.nowhere(ts, x, o), b.nowhere(ts, y, o))
		})
		var out []slot
		for _, x := range movable {
			if b.load[o]+t.Weight <= b.limit {
				break
			}
			b.load[o] -= ts[x.i].Weight
			b.owners[int(x.i)*b.rf+int(x.rank)] = -1
			out = append(out, x)
		}
		return o, out
	}
	return -1, nil
}

// nowhere is 1 when no node but o, among those that do not hold x's
// target, has room for x; 0 otherwise.
func (b *Bounded) nowhere(ts []Load, x slot, o int32) int {
	own := b.owners[int(x.i)*b.rf : int(x.i+1)*b.rf]
	for n := range int32(len(b.load)) {
		if n != o && !slices.Contains(own, n) && b.load[n]+ts[x.i].Weight <= b.limit {
			return 0
		}
	}
	return 1
}

// leastLoaded is the least loaded node not in have, the first by name on a
// tie.
func (b *Bounded) leastLoaded(have []int32) int32 {
	best := int32(-1)
	for o := range int32(len(b.load)) {
		if slices.Contains(have, o) {
			continue
		}
		if best < 0 || b.load[o] < b.load[best] {
			best = o
		}
	}
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
