package sim

import (
	"slices"

	"github.com/shoal-dev/shoal/ring"
)

// DesignBoundedSticky is ring.NewSticky, which shoal does not run yet:
// bounded loads that remember who holds each target (every node could read
// it from the publishers of the gossiped weights). A target stays on its holder; one whose holder is gone
// (a leave) goes to its plain-ring owner if that stays within c × the mean,
// else to the least loaded node; a node below the mean takes back its
// plain-ring targets from holders above the mean; a node above c × the mean
// sheds its lightest targets to the least loaded node. For one round after
// a target changes hands its old holder still publishes it (as placement's
// weigher keeps a lost target until the new owner publishes it), and the
// placement then picks between the two as ring.NewSticky does.
const DesignBoundedSticky = "bounded load, remembering holders"

type stickySim struct {
	*boundedSim
	holder []string // per target: who holds it now; "" nobody yet
	// old is, per target that just changed hands, the holder before: it
	// still publishes the target for one round, until it sees the new
	// holder publish it (as placement's weigher keeps a lost target).
	old []string
}

func newSticky(ts []Target, names []string, pol ring.WeightPolicy, c float64) *stickySim {
	return &stickySim{boundedSim: newBounded(ts, names, pol, c, false), holder: make([]string, len(ts)), old: make([]string, len(ts))}
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

// place is ring.NewSticky over the published weights (an unpublished one
// counts as the mean, as there) and the holders.
func (s *stickySim) place() []int {
	loads := make([]ring.Load, len(s.ts))
	holders := make(map[uint64][]string, len(s.ts))
	for i, t := range s.ts {
		loads[i] = ring.Load{Key: t.Key, Weight: s.published[i]}
		for _, h := range []string{s.holder[i], s.old[i]} {
			if h != "" {
				holders[t.Key] = append(holders[t.Key], h)
			}
		}
	}
	b := ring.NewSticky(s.r, loads, holders, s.c)
	idx := indexOf(s.names)
	out := make([]int, len(s.ts))
	for i, t := range s.ts {
		out[i] = idx[b.Primary(t.Key)]
	}
	return out
}

func (s *stickySim) update(owners []int, loads []float64) bool {
	overlap := false
	for i, o := range owners {
		s.old[i] = ""
		if h := s.holder[i]; h != "" && h != s.names[o] {
			s.old[i], overlap = h, true
		}
		s.holder[i] = s.names[o]
	}
	changed := s.boundedSim.update(owners, loads)
	return changed || overlap || !slices.Equal(owners, s.place())
}

func (s *stickySim) clone() designSim {
	return &stickySim{boundedSim: s.boundedSim.clone().(*boundedSim), holder: slices.Clone(s.holder), old: slices.Clone(s.old)}
}
