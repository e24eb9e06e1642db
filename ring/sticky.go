package ring

import (
	"cmp"
	"slices"
)

// NewSticky is a bounded-load placement with one owner per target that
// remembers who holds each target now: holders maps a key to the nodes
// that say they hold it (the publishers of its weight would do: every
// replica reads the same; names not on r are ignored). Package placement
// does not use it yet: wired in, it did not settle fast enough in the e2e
// tests (docs/DESIGN.md, "Placement"). While a target changes hands both its old
// and its new holder publish it for a moment; the holder is then its
// plain-ring owner if that is one of them, else the last by name, a rule
// that agrees with the moves below often enough that such a moment rarely
// moves anything else. Every node that has the same ring, weights and
// holders computes the same owners, so the holders must come from gossiped
// state. Weights are cleaned as NewBounded does, and c is the same
// capacity factor.
//
// Steps, each in a fixed order so that the result never depends on the
// input's order:
//
//  1. A target stays on its holder.
//  2. A target without one (new, or its holder left) goes to its plain-ring
//     owner if that stays within c × the mean, else to the least loaded
//     node: a leave moves the leaver's targets once and nothing else.
//  3. A node below the mean takes back its plain-ring targets from holders
//     above the mean while it stays at most at the mean (in a hashed key
//     order): a joiner fills from the nodes that have the most to give.
//  4. A node above c × the mean sheds its lightest targets (weight class,
//     then the hashed order) until it is within, and each goes, the
//     heaviest class first, to the least loaded node if it fits there
//     within c × the mean, else to the least loaded node where it fits
//     once lighter targets leave (they are placed the same way); one
//     that fits nowhere even so stays.
//
// Against NewBounded, which recomputes every shed set from the ring, this
// moves on a join or a leave little more than the joiner's fill or the
// leaver's targets (docs/BENCHMARKS.md, "Placement designs").
func NewSticky(r *Ring, targets []Load, holders map[uint64][]string, c float64) *Bounded {
	if !(c > 1) || c != c || c > 1e300 {
		c = DefaultLoadBound
	}
	b := &Bounded{ring: r, rf: 1}
	n := r.Len()
	if n == 0 {
		return b
	}
	ts := cleanLoads(targets)
	total := 0.0
	for _, t := range ts {
		total += t.Weight
	}
	mean := total / float64(n)
	b.limit = c * mean
	b.keys = make([]uint64, len(ts))
	b.owners = make([]int32, len(ts))
	b.load = make([]float64, n)
	home := make([]int32, len(ts)) // plain-ring owner
	var orphans []int
	for i, t := range ts {
		b.keys[i] = t.Key
		home[i] = r.owner[r.search(t.Key)]
		h := holderOf(r, home[i], holders[t.Key])
		if h < 0 {
			b.owners[i] = -1
			orphans = append(orphans, i)
			continue
		}
		b.owners[i] = h
		b.load[h] += t.Weight
	}
	for _, i := range orphans {
		o := home[i]
		if b.load[o]+ts[i].Weight > b.limit {
			o = b.leastLoaded(nil)
		}
		b.owners[i] = o
		b.load[o] += ts[i].Weight
	}

	order := make([]slot, len(ts))
	for i := range order {
		order[i] = slot{i: int32(i)}
	}
	slices.SortFunc(order, func(x, y slot) int { return cmp.Compare(shedRank(ts[x.i].Key), shedRank(ts[y.i].Key)) })
	for _, e := range order {
		i, w := int(e.i), ts[e.i].Weight
		o, h := home[i], b.owners[i]
		if o != h && b.load[o]+w <= mean && b.load[h] > mean {
			b.load[o] += w
			b.load[h] -= w
			b.owners[i] = o
		}
	}

	sortShedOrder(ts, order)
	var shed []slot
	for _, e := range order {
		if h := b.owners[e.i]; b.load[h] > b.limit {
			b.load[h] -= ts[e.i].Weight
			b.owners[e.i] = -1
			shed = append(shed, slot{i: e.i, rank: h}) // rank: where it was
		}
	}
	slices.SortStableFunc(shed, func(x, y slot) int {
		return cmp.Compare(weightClass(ts[y.i].Weight), weightClass(ts[x.i].Weight))
	})
	for k := 0; k < len(shed); k++ {
		e := shed[k]
		o := b.leastLoaded(nil)
		if b.load[o]+ts[e.i].Weight > b.limit {
			// Room made by lighter targets, which are placed in turn; one
			// that fits nowhere even so stays where it was: moving it would
			// only push another node over, and back again.
			var out []slot
			if o, out = b.makeRoom(ts, e); o < 0 {
				o = e.rank
			}
			shed = append(shed, out...)
		}
		b.owners[e.i] = o
		b.load[o] += ts[e.i].Weight
	}
	return b
}

// makeRoom finds the least loaded node (other than where e was) on which
// e fits once targets of lighter classes leave, takes them off it, the
// lightest first in shed order, and returns the node and them (each with
// the node as where it was); -1 when there is no such node.
func (b *Bounded) makeRoom(ts []Load, e slot) (int32, []slot) {
	c := weightClass(ts[e.i].Weight)
	nodes := make([]int32, len(b.load))
	for o := range nodes {
		nodes[o] = int32(o)
	}
	slices.SortStableFunc(nodes, func(x, y int32) int { return cmp.Compare(b.load[x], b.load[y]) })
	for _, o := range nodes {
		if o == e.rank {
			continue
		}
		var lighter []slot
		free := 0.0
		for i, h := range b.owners {
			if h == o && weightClass(ts[i].Weight) < c {
				lighter = append(lighter, slot{i: int32(i), rank: o})
				free += ts[i].Weight
			}
		}
		if b.load[o]-free+ts[e.i].Weight > b.limit {
			continue
		}
		sortShedOrder(ts, lighter)
		var out []slot
		for _, x := range lighter {
			if b.load[o]+ts[e.i].Weight <= b.limit {
				break
			}
			b.load[o] -= ts[x.i].Weight
			b.owners[x.i] = -1
			out = append(out, x)
		}
		return o, out
	}
	return -1, nil
}

// holderOf picks the holder among the nodes that say they hold a target
// whose ring owner is home: home if it is one of them, else the last by
// name; -1 when none is on r.
func holderOf(r *Ring, home int32, names []string) int32 {
	best := int32(-1)
	for _, name := range names {
		h, ok := slices.BinarySearch(r.nodes, name)
		switch {
		case !ok:
		case int32(h) == home:
			return home
		case int32(h) > best:
			best = int32(h)
		}
	}
	return best
}
