package sim

import (
	"cmp"
	"slices"

	"github.com/shoal-dev/shoal/ring"
)

// DesignBoundedSticky is a prototype that shoal does not run: bounded loads
// that remember who holds each target (which every node could read from
// the publishers of the gossiped weights). A target stays on its holder; a
// target whose holder is gone (a leave) goes to its plain-ring owner if that
// stays within c × the mean, else to the least loaded node, so that a leave
// moves the leaver's targets once and nothing else; a node below the mean
// takes back its plain-ring targets from holders above the mean; a node
// above c × the mean sheds its lightest targets (hashed order within a
// weight class), each to the least loaded node. It is here
// to measure how much a placement with memory saves on a join or a leave
// against the stateless bounded load (docs/DESIGN.md, "Placement").
const DesignBoundedSticky = "bounded load, remembering holders (prototype)"

type stickySim struct {
	*boundedSim
	holder []string // per target: who holds it now; "" nobody yet
}

func newSticky(ts []Target, names []string, pol ring.WeightPolicy, c float64) *stickySim {
	return &stickySim{boundedSim: newBounded(ts, names, pol, c, false), holder: make([]string, len(ts))}
}

func (s *stickySim) owners() []int { return s.ownersSeen(nil) }

// ownersSeen places every target (the gossiped set, as the stateless
// design does) and marks those the view does not see.
func (s *stickySim) ownersSeen(seen []bool) []int {
	out := s.place()
	for i := range out {
		if seen != nil && !seen[i] {
			out[i] = -1
		}
	}
	return out
}

// weights are the published weights; an unpublished one counts as the
// mean of the published ones, as ring.NewBounded does.
func (s *stickySim) weights() []float64 {
	sum, cnt := 0.0, 0
	for _, p := range s.published {
		if p > 0 {
			sum, cnt = sum+p, cnt+1
		}
	}
	def := 1.0
	if cnt > 0 {
		def = sum / float64(cnt)
	}
	w := make([]float64, len(s.ts))
	for i, p := range s.published {
		w[i] = p
		if !(p > 0) {
			w[i] = def
		}
	}
	return w
}

func (s *stickySim) place() []int {
	n := len(s.names)
	idx := indexOf(s.names)
	w := s.weights()
	total := 0.0
	for _, x := range w {
		total += x
	}
	mean := total / float64(n)
	limit := s.c * mean
	hold := make([]int, len(s.ts))
	ringOwner := make([]int, len(s.ts))
	load := make([]float64, n)
	for i, t := range s.ts {
		ringOwner[i] = idx[s.r.Primary(t.Key)]
		h, ok := idx[s.holder[i]]
		if !ok {
			hold[i] = -1
			continue
		}
		hold[i] = h
		load[h] += w[i]
	}
	for i := range s.ts {
		if hold[i] >= 0 {
			continue
		}
		h := ringOwner[i]
		if load[h]+w[i] > s.c*mean {
			h = 0
			for o := range load {
				if load[o] < load[h] {
					h = o
				}
			}
		}
		hold[i] = h
		load[h] += w[i]
	}
	order := make([]int, len(s.ts))
	for i := range order {
		order[i] = i
	}
	rank := func(i int) uint64 { return mix(s.ts[i].Key) }
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(rank(a), rank(b)) })
	for _, i := range order {
		r, h := ringOwner[i], hold[i]
		if r != h && load[r]+w[i] <= mean && load[h] > mean {
			load[r], load[h], hold[i] = load[r]+w[i], load[h]-w[i], r
		}
	}
	byClass := slices.Clone(order)
	slices.SortStableFunc(byClass, func(a, b int) int { return cmp.Compare(class(w[a]), class(w[b])) })
	var shed []int
	for _, i := range byClass {
		if h := hold[i]; load[h] > limit {
			load[h] -= w[i]
			shed = append(shed, i)
		}
	}
	slices.SortStableFunc(shed, func(a, b int) int { return cmp.Compare(class(w[b]), class(w[a])) })
	for _, i := range shed {
		best := 0
		for o := range load {
			if load[o] < load[best] {
				best = o
			}
		}
		load[best] += w[i]
		hold[i] = best
	}
	return hold
}

func (s *stickySim) update(owners []int, loads []float64) bool {
	for i, o := range owners {
		s.holder[i] = s.names[o]
	}
	changed := s.boundedSim.update(owners, loads)
	return changed || !slices.Equal(owners, s.place())
}

func (s *stickySim) clone() designSim {
	return &stickySim{boundedSim: s.boundedSim.clone().(*boundedSim), holder: slices.Clone(s.holder)}
}

// mix is a hash of a key, for an order unrelated to its ring position.
func mix(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return k
}

// class is the binary exponent of a weight (weights within a factor of
// two share a class).
func class(w float64) int {
	e := 0
	for w >= 2 {
		w, e = w/2, e+1
	}
	return e
}
