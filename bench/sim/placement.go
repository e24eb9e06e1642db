package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/shoal-dev/shoal/ring"
)

// This file compares placement designs in which every node computes the
// same owners from gossiped state alone (issue 11): today's ring, hashmod,
// load-weighted tokens (ring.NewWeighted driven by ring.LoadPolicy) and
// bounded-load consistent hashing (Mirrokni, Thorup, Zadimoghaddam). Time
// advances in rounds of one weight-update period: in each round the nodes
// own what the current gossiped state gives them, measure their load, and
// publish new state for the next round.

// Design names, as they appear in the report.
const (
	DesignRing     = "ring (today)"
	DesignHashmod  = "hashmod"
	DesignWeighted = "weighted tokens"
	DesignBounded  = "bounded load"
	// DesignBoundedScratch is bounded load placed from scratch every time
	// (ring.NewBounded, what versions before sticky placement did): the
	// same balance, more movement.
	DesignBoundedScratch = "bounded load, from scratch"
	// DesignBoundedLocal is bounded load over each node's own discovered
	// targets instead of the gossiped set: the same placement while views
	// agree, shown only where they disagree.
	DesignBoundedLocal = "bounded load, local target set"
)

// PlacementConfig is one simulation setup. Zero fields mean the values of
// DefaultPlacementConfig.
type PlacementConfig struct {
	// Tokens drives the weighted-tokens design.
	Tokens TokenPolicy
	// Weights smooths and publishes the per-target weights of the
	// bounded-load design.
	Weights ring.WeightPolicy
	// BoundC is the bounded-load design's capacity factor: no node above
	// BoundC × the mean, unless a target fits nowhere.
	BoundC float64
	// Noise is the load noise: every target's load is its size times a
	// factor drawn uniformly from [1-Noise, 1+Noise] afresh every round.
	Noise float64
	// HourRounds is the number of update rounds in an hour (60: a weight
	// update per minute).
	HourRounds int
	// MaxRounds bounds a convergence run.
	MaxRounds int
	// Leavers is how many different nodes join, and how many leave, in
	// turn (each from the converged cluster; averaged): which node joins
	// or leaves decides how much it takes or leaves, so one of each is
	// not a measurement.
	Leavers int
	// Seed makes the noise reproducible.
	Seed uint64
}

// DefaultPlacementConfig is what make bench runs.
func DefaultPlacementConfig() PlacementConfig {
	return PlacementConfig{
		Tokens:     DefaultTokenPolicy(),
		Weights:    ring.DefaultWeightPolicy(),
		BoundC:     ring.DefaultLoadBound,
		Noise:      0.20,
		HourRounds: 60,
		MaxRounds:  40,
		Leavers:    8,
		Seed:       1,
	}
}

func (c PlacementConfig) withDefaults() PlacementConfig {
	d := DefaultPlacementConfig()
	if c.Tokens == (TokenPolicy{}) {
		c.Tokens = d.Tokens
	}
	if c.Weights == (ring.WeightPolicy{}) {
		c.Weights = d.Weights
	}
	if c.BoundC <= 1 {
		c.BoundC = d.BoundC
	}
	if c.Noise <= 0 {
		c.Noise = d.Noise
	}
	if c.HourRounds <= 0 {
		c.HourRounds = d.HourRounds
	}
	if c.MaxRounds <= 0 {
		c.MaxRounds = d.MaxRounds
	}
	if c.Leavers <= 0 {
		c.Leavers = d.Leavers
	}
	if c.Seed == 0 {
		c.Seed = d.Seed
	}
	return c
}

// PlacementResult is what one design does at one size.
type PlacementResult struct {
	Design string
	Nodes  int
	// Balance once converged, without noise: most loaded node over the mean.
	MaxMeanTargets, MaxMeanSamples float64
	// ConvergeRounds is the number of update rounds from a cold start
	// (every node at the default weight) until no published state changes;
	// MaxRounds+1 when it never settles.
	ConvergeRounds int
	// Fractions of all samples that change owner when one node joins
	// (leaves): at once, and in total until the state settles again.
	JoinNow, JoinSettled, LeaveNow, LeaveSettled float64
	// SettleRounds is the most rounds a join or leave took to settle.
	SettleRounds int
	// ChurnPerHour is the fraction of all samples that change owner in one
	// hour of steady state under load noise; WorstNoisy is the worst
	// max/mean samples seen during that hour.
	ChurnPerHour, WorstNoisy float64
}

// Disagreement is what happens while two halves of the cluster have
// different views: targets with no scraper or with two.
type Disagreement struct {
	Design string
	Nodes  int
	// Targets: 1% of targets are seen by only half of the nodes (a
	// discovery update has reached them first). Orphans and duplicates
	// among the 99% that every node sees, then among the 1%.
	TargetsCommonOrphans, TargetsCommonDups, TargetsPartialOrphans, TargetsPartialDups int
	// State: the largest target has doubled and its new weight (bounded
	// load) or its owner's new token count (weighted tokens) is published;
	// half of the nodes have it, half the state before (one gossip
	// convergence).
	WeightsOrphans, WeightsDups int
	// WeightsMoved is how many targets that state change moves at all.
	WeightsMoved int
	// Join: half of the nodes have seen a new node join.
	JoinOrphans, JoinDups int
	// The same two cases with the hand-off gate (placement.Coordinator's
	// Contested): a node does not start a target it gained while a peer
	// follows another placement, so only the owner before the change
	// scrapes, if its own view still gives it the target. Duplicates are
	// then impossible; orphans last until the views agree.
	WeightsGatedOrphans, WeightsGatedDups, JoinGatedOrphans, JoinGatedDups int
	Targets                                                                int
}

// designSim is one design's state machine.
type designSim interface {
	// owners returns the owner (node index) of every target under the
	// current published state.
	owners() []int
	// update measures the round's loads (per target) and publishes new
	// state; it reports whether anything published changed.
	update(owners []int, loads []float64) bool
	// join adds node name; leave removes node index i.
	join(name string)
	leave(i int)
	nodes() []string
	// clone copies the state, for disagreement views.
	clone() designSim
	// ownersSeen returns the owners under the current state for a view
	// that sees only the targets with seen[i] true (-1 for unseen).
	ownersSeen(seen []bool) []int
}

// ---- today's ring and hashmod: nothing is published, nothing adapts ----

type staticSim struct {
	ts      []Target
	names   []string
	hashmod bool
	r       *ring.Ring
}

func newStatic(ts []Target, names []string, hashmod bool) *staticSim {
	s := &staticSim{ts: ts, names: slices.Clone(names), hashmod: hashmod}
	s.rebuild()
	return s
}

func (s *staticSim) rebuild() {
	if !s.hashmod {
		s.r = ring.New(s.names, 0)
	}
}

func (s *staticSim) owners() []int { return s.ownersSeen(nil) }

func (s *staticSim) ownersSeen(seen []bool) []int {
	out := make([]int, len(s.ts))
	idx := indexOf(s.names)
	for i, t := range s.ts {
		switch {
		case seen != nil && !seen[i]:
			out[i] = -1
		case s.hashmod:
			// Prometheus' hashmod sorts nothing: node i of the list gets
			// key mod N == i, the list being the sorted names.
			out[i] = int(t.Key % uint64(len(s.names)))
		default:
			out[i] = idx[s.r.Primary(t.Key)]
		}
	}
	return out
}

func (s *staticSim) update([]int, []float64) bool { return false }
func (s *staticSim) join(name string)             { s.names = append(s.names, name); s.rebuild() }
func (s *staticSim) leave(i int)                  { s.names = slices.Delete(s.names, i, i+1); s.rebuild() }
func (s *staticSim) nodes() []string              { return s.names }
func (s *staticSim) clone() designSim {
	c := *s
	c.names = slices.Clone(s.names)
	return &c
}

// ---- load-weighted tokens ----

type weightedSim struct {
	ts     []Target
	pol    TokenPolicy
	names  []string
	tokens []int
	load   []float64 // per target, smoothed by its current owner; <0 unknown
	lowner []string  // who smoothed load[i]
	r      *ring.Ring
}

func newWeighted(ts []Target, names []string, pol TokenPolicy) *weightedSim {
	s := &weightedSim{ts: ts, pol: pol, names: slices.Clone(names)}
	for range names {
		s.tokens = append(s.tokens, ring.DefaultTokensPerNode)
	}
	s.load = make([]float64, len(ts))
	s.lowner = make([]string, len(ts))
	s.rebuild()
	return s
}

func (s *weightedSim) rebuild() {
	ms := make([]ring.Member, len(s.names))
	for i, n := range s.names {
		ms[i] = ring.Member{Name: n, Tokens: s.tokens[i]}
	}
	s.r = ring.NewWeighted(ms)
}

func (s *weightedSim) owners() []int { return s.ownersSeen(nil) }

func (s *weightedSim) ownersSeen(seen []bool) []int {
	idx := indexOf(s.names)
	out := make([]int, len(s.ts))
	for i, t := range s.ts {
		if seen != nil && !seen[i] {
			out[i] = -1
			continue
		}
		out[i] = idx[s.r.Primary(t.Key)]
	}
	return out
}

// update: every node's load is the sum of the smoothed loads of the
// targets it owns now; a target's estimate starts afresh when it changes
// owner (the new owner has only its own scrapes), so a node's estimate
// follows its ownership without the lag of smoothing a node-level total.
func (s *weightedSim) update(owners []int, loads []float64) bool {
	measured := make([]float64, len(s.names))
	for i, o := range owners {
		if s.lowner[i] != s.names[o] {
			s.load[i], s.lowner[i] = loads[i], s.names[o]
		} else {
			s.load[i] = s.pol.Smooth(s.load[i], loads[i])
		}
		measured[o] += s.load[i]
	}
	sum := 0.0
	for _, m := range measured {
		sum += m
	}
	mean := sum / float64(len(s.names))
	changed := false
	for i := range s.names {
		next := s.pol.Next(s.tokens[i], measured[i], mean)
		if next != s.tokens[i] {
			s.tokens[i], changed = next, true
		}
	}
	if changed {
		s.rebuild()
	}
	return changed
}

func (s *weightedSim) join(name string) {
	s.tokens = append(s.tokens, s.pol.JoinTokens(s.tokens))
	s.names = append(s.names, name)
	s.rebuild()
}

func (s *weightedSim) leave(i int) {
	s.names = slices.Delete(s.names, i, i+1)
	s.tokens = slices.Delete(s.tokens, i, i+1)
	s.rebuild()
}

func (s *weightedSim) nodes() []string { return s.names }

func (s *weightedSim) clone() designSim {
	c := *s
	c.names, c.tokens, c.load, c.lowner = slices.Clone(s.names), slices.Clone(s.tokens), slices.Clone(s.load), slices.Clone(s.lowner)
	return &c
}

// ---- bounded-load consistent hashing ----

// boundedSim is ring.NewSticky (ring.NewBounded with scratch) on today's
// 512-token ring. Each target's weight is published by its owner through
// ring.WeightPolicy (smoothed by the owner, restarted on a change of owner,
// republished only outside the tolerance band), and its publisher is its
// current owner. With local set, each node places the targets its own
// discovery sees; otherwise it places the published set, which is gossiped
// state and so the same on every node.
type boundedSim struct {
	ts        []Target
	pol       ring.WeightPolicy
	c         float64
	local     bool
	scratch   bool
	names     []string
	published []float64       // per target; 0 unknown
	smooth    []ring.Estimate // per target, by its current owner
	sowner    []int           // who smoothed it
	r         *ring.Ring
}

func newBounded(ts []Target, names []string, pol ring.WeightPolicy, c float64, local, scratch bool) *boundedSim {
	s := &boundedSim{ts: ts, pol: pol, c: c, local: local, scratch: scratch, names: slices.Clone(names)}
	s.published = make([]float64, len(ts))
	s.smooth = make([]ring.Estimate, len(ts))
	s.sowner = make([]int, len(ts))
	for i := range ts {
		s.sowner[i] = -1
	}
	s.rebuild()
	return s
}

func (s *boundedSim) rebuild() { s.r = ring.New(s.names, 0) }

func (s *boundedSim) owners() []int { return s.ownersSeen(nil) }

// place is the design's placement of loads: from the owners, or from
// scratch (which reads no owner).
func (s *boundedSim) place(loads []ring.Owned) *ring.Bounded {
	if !s.scratch {
		return ring.NewSticky(s.r, loads, s.c, 1)
	}
	plain := make([]ring.Load, len(loads))
	for i, l := range loads {
		plain[i] = l.Load
	}
	return ring.NewBounded(s.r, plain, s.c, 1)
}

func (s *boundedSim) ownersSeen(seen []bool) []int {
	loads := make([]ring.Owned, 0, len(s.ts))
	for i, t := range s.ts {
		if s.local && seen != nil && !seen[i] {
			continue
		}
		l := ring.Owned{Load: ring.Load{Key: t.Key, Weight: s.published[i]}}
		if o := s.sowner[i]; o >= 0 {
			l.Owner = s.names[o] // its owner publishes it
		}
		loads = append(loads, l)
	}
	b := s.place(loads)
	idx := indexOf(s.names)
	out := make([]int, len(s.ts))
	for i, t := range s.ts {
		out[i] = -1
		if seen == nil || seen[i] {
			out[i] = idx[b.Primary(t.Key)]
		}
	}
	return out
}

func (s *boundedSim) update(owners []int, loads []float64) bool {
	changed := false
	for i, l := range loads {
		// A new owner starts its own estimate and keeps publishing the
		// weight it found in the gossiped state until it has one.
		if s.sowner[i] != owners[i] {
			s.smooth[i], s.sowner[i] = ring.Estimate{}, owners[i]
		}
		s.smooth[i] = s.pol.Smooth(s.smooth[i], l)
		if p := s.pol.Publish(s.published[i], s.smooth[i]); p != s.published[i] {
			s.published[i], changed = p, true
		}
		// A weight still waiting for enough measurements is a change to
		// come: the state has not settled.
		if s.published[i] == 0 {
			changed = true
		}
	}
	return changed
}

func (s *boundedSim) join(name string) { s.names = append(s.names, name); s.rebuild() }
func (s *boundedSim) leave(i int) {
	s.names = slices.Delete(s.names, i, i+1)
	// Owner indexes above i shift down; the smoothing restarts anyway when
	// a target's owner changes, so only the index matters.
	for k, o := range s.sowner {
		if o == i {
			s.sowner[k] = -1
		} else if o > i {
			s.sowner[k] = o - 1
		}
	}
	s.rebuild()
}
func (s *boundedSim) nodes() []string { return s.names }
func (s *boundedSim) clone() designSim {
	c := *s
	c.names, c.published, c.smooth, c.sowner = slices.Clone(s.names), slices.Clone(s.published), slices.Clone(s.smooth), slices.Clone(s.sowner)
	return &c
}

// ---- running a design ----

func indexOf(names []string) map[string]int {
	m := make(map[string]int, len(names))
	for i, n := range names {
		m[n] = i
	}
	return m
}

func newDesign(design string, ts []Target, names []string, c PlacementConfig) designSim {
	switch design {
	case DesignRing:
		return newStatic(ts, names, false)
	case DesignHashmod:
		return newStatic(ts, names, true)
	case DesignWeighted:
		return newWeighted(ts, names, c.Tokens)
	case DesignBounded:
		return newBounded(ts, names, c.Weights, c.BoundC, false, false)
	case DesignBoundedScratch:
		return newBounded(ts, names, c.Weights, c.BoundC, false, true)
	case DesignBoundedLocal:
		return newBounded(ts, names, c.Weights, c.BoundC, true, false)
	}
	panic("unknown design " + design)
}

// runner drives one design through rounds and counts what moves.
type runner struct {
	d     designSim
	ts    []Target
	total float64
	prev  []string // owner names of the last round
	rng   *rand.Rand
	noise float64
	boost int // 1 + the index of a target whose load is doubled; 0 none
}

func (r *runner) loads(noisy bool) []float64 {
	out := make([]float64, len(r.ts))
	for i, t := range r.ts {
		out[i] = float64(t.Samples)
		if noisy {
			out[i] *= 1 + r.noise*(2*r.rng.Float64()-1)
		}
		if i == r.boost-1 {
			out[i] *= 2
		}
	}
	return out
}

// round places the targets, counts the samples that changed owner since
// the last round, lets the design measure and publish, and reports the
// moved fraction and whether the published state changed.
func (r *runner) round(noisy bool) (moved float64, changed bool, owners []int) {
	owners = r.d.owners()
	names := r.d.nodes()
	cur := make([]string, len(owners))
	m := 0.0
	for i, o := range owners {
		cur[i] = names[o]
		if r.prev != nil && r.prev[i] != cur[i] {
			m += float64(r.ts[i].Samples)
		}
	}
	r.prev = cur
	changed = r.d.update(owners, r.loads(noisy))
	return m / r.total, changed, owners
}

// settle runs noise-free rounds until the published state stops changing;
// it returns the moved fraction summed over those rounds, the moved
// fraction of the first round, and the number of rounds.
func (r *runner) settle(maxRounds int) (total, first float64, rounds int) {
	for rounds = 1; rounds <= maxRounds; rounds++ {
		m, changed, _ := r.round(false)
		if rounds == 1 {
			first = m
		}
		total += m
		if !changed {
			return total, first, rounds
		}
	}
	return total, first, rounds
}

func balance(ts []Target, owners []int, n int) (targets, samples float64) {
	cnt := make([]float64, n)
	smp := make([]float64, n)
	total := 0.0
	for i, o := range owners {
		cnt[o]++
		smp[o] += float64(ts[i].Samples)
		total += float64(ts[i].Samples)
	}
	return slices.Max(cnt) / (float64(len(ts)) / float64(n)), slices.Max(smp) / (total / float64(n))
}

// SimulatePlacement runs one design on n nodes.
func SimulatePlacement(design string, n int, ts []Target, c PlacementConfig) PlacementResult {
	c = c.withDefaults()
	total := 0.0
	for _, t := range ts {
		total += float64(t.Samples)
	}
	res := PlacementResult{Design: design, Nodes: n}
	names := NodeNames(n)
	fresh := func(d designSim, seed uint64) *runner {
		return &runner{d: d, ts: ts, total: total, rng: rand.New(rand.NewPCG(c.Seed, seed)), noise: c.Noise}
	}

	// Cold start to convergence.
	base := fresh(newDesign(design, ts, names, c), 1)
	_, _, res.ConvergeRounds = base.settle(c.MaxRounds)
	owners := base.d.owners()
	res.MaxMeanTargets, res.MaxMeanSamples = balance(ts, owners, n)
	converged := base.d.clone()

	// Nodes join in turn (each the converged cluster), then leave.
	for k := range c.Leavers {
		j := fresh(converged.clone(), 200+uint64(k))
		j.prev = namesOf(owners, converged.nodes())
		j.d.join("shoal-" + strconv.Itoa(n+k))
		settled, now, rounds := j.settle(c.MaxRounds)
		res.JoinNow += now / float64(c.Leavers)
		res.JoinSettled += settled / float64(c.Leavers)
		res.SettleRounds = max(res.SettleRounds, rounds)
	}
	leavers := min(c.Leavers, n-1)
	for k := range leavers {
		l := fresh(converged.clone(), 3+uint64(k))
		l.prev = namesOf(owners, converged.nodes())
		l.d.leave(k * n / leavers)
		settled, now, rounds := l.settle(c.MaxRounds)
		res.LeaveNow += now / float64(leavers)
		res.LeaveSettled += settled / float64(leavers)
		res.SettleRounds = max(res.SettleRounds, rounds)
	}

	// An hour of noisy steady state.
	h := fresh(converged.clone(), 100)
	h.prev = namesOf(owners, converged.nodes())
	for range c.HourRounds {
		m, _, o := h.round(true)
		res.ChurnPerHour += m
		_, s := balance(ts, o, n)
		res.WorstNoisy = max(res.WorstNoisy, s)
	}
	return res
}

func namesOf(owners []int, names []string) []string {
	out := make([]string, len(owners))
	for i, o := range owners {
		out[i] = names[o]
	}
	return out
}

// SimulateDisagreement converges a design on n nodes, then lets two halves
// of the nodes (even and odd indexes) hold different views and counts the
// targets that nobody scrapes and those scraped twice.
func SimulateDisagreement(design string, n int, ts []Target, c PlacementConfig) Disagreement {
	c = c.withDefaults()
	total := 0.0
	for _, t := range ts {
		total += float64(t.Samples)
	}
	names := NodeNames(n)
	r := &runner{d: newDesign(design, ts, names, c), ts: ts, total: total, rng: rand.New(rand.NewPCG(c.Seed, 7)), noise: c.Noise}
	r.settle(c.MaxRounds)
	res := Disagreement{Design: design, Nodes: n, Targets: len(ts)}

	// count: node i uses view a when i is even, b when odd; owners are
	// node names (views may differ in membership); "" means unseen.
	count := func(a, b []string, inA func(string) bool) (orph, dup []int) {
		orph, dup = make([]int, len(ts)), make([]int, len(ts))
		for i := range ts {
			scrapers := 0
			if a[i] != "" && inA(a[i]) {
				scrapers++
			}
			if b[i] != "" && !inA(b[i]) {
				scrapers++
			}
			switch scrapers {
			case 0:
				orph[i] = 1
			case 2:
				dup[i] = 1
			}
		}
		return orph, dup
	}
	half := func(names []string) func(string) bool {
		even := map[string]bool{}
		for i, n := range names {
			even[n] = i%2 == 0
		}
		return func(n string) bool { return even[n] }
	}
	// gated counts like count, but a node scrapes only what its view
	// gives it and the agreed owners before gave it too.
	gated := func(a, b, before []string, inA func(string) bool) (orph, dup []int) {
		orph, dup = make([]int, len(ts)), make([]int, len(ts))
		for i := range ts {
			scrapers := 0
			if a[i] != "" && inA(a[i]) && a[i] == before[i] {
				scrapers++
			}
			if b[i] != "" && !inA(b[i]) && b[i] == before[i] {
				scrapers++
			}
			switch scrapers {
			case 0:
				orph[i] = 1
			case 2:
				dup[i] = 1
			}
		}
		return orph, dup
	}
	sum := func(xs []int, keep func(int) bool) int {
		s := 0
		for i, x := range xs {
			if keep(i) {
				s += x
			}
		}
		return s
	}
	all := func(int) bool { return true }

	// 1% of targets seen only by the even half.
	seen := make([]bool, len(ts))
	partial := make([]bool, len(ts))
	for i := range ts {
		partial[i] = i%100 == 37
		seen[i] = !partial[i]
	}
	full := namesOf(r.d.owners(), r.d.nodes())
	part := namesOf0(r.d.ownersSeen(seen), r.d.nodes())
	o, d := count(full, part, half(r.d.nodes()))
	res.TargetsCommonOrphans = sum(o, func(i int) bool { return !partial[i] })
	res.TargetsCommonDups = sum(d, func(i int) bool { return !partial[i] })
	res.TargetsPartialOrphans = sum(o, func(i int) bool { return partial[i] })
	res.TargetsPartialDups = sum(d, func(i int) bool { return partial[i] })

	// The largest target doubles for good: run until the published state
	// changes, and compare the state just before with the state after, as
	// if the odd half had not heard of the change yet.
	base := r.d.clone()
	largest := slices.MaxFunc(ts, func(a, b Target) int { return a.Samples - b.Samples }).Samples
	r.boost = 1 + slices.IndexFunc(ts, func(t Target) bool { return t.Samples == largest })
	for range 30 {
		old := r.d.clone()
		if _, changed, _ := r.round(false); changed {
			now, before := namesOf(r.d.owners(), r.d.nodes()), namesOf(old.owners(), old.nodes())
			o, d = count(now, before, half(r.d.nodes()))
			res.WeightsOrphans, res.WeightsDups = sum(o, all), sum(d, all)
			o, d = gated(now, before, before, half(r.d.nodes()))
			res.WeightsGatedOrphans, res.WeightsGatedDups = sum(o, all), sum(d, all)
			for i := range now {
				if now[i] != before[i] {
					res.WeightsMoved++
				}
			}
			break
		}
	}

	// A node joins; the even half (and the joiner, which counts as even)
	// has seen it.
	old := base
	joined := old.clone()
	joined.join("shoal-" + strconv.Itoa(n))
	inA := half(old.nodes())
	inAJ := func(s string) bool { return s == "shoal-"+strconv.Itoa(n) || inA(s) }
	after, before := namesOf(joined.owners(), joined.nodes()), namesOf(old.owners(), old.nodes())
	o, d = count(after, before, inAJ)
	res.JoinOrphans, res.JoinDups = sum(o, all), sum(d, all)
	o, d = gated(after, before, before, inAJ)
	res.JoinGatedOrphans, res.JoinGatedDups = sum(o, all), sum(d, all)
	return res
}

func namesOf0(owners []int, names []string) []string {
	out := make([]string, len(owners))
	for i, o := range owners {
		if o >= 0 {
			out[i] = names[o]
		}
	}
	return out
}

// Designs is the order of the report.
var Designs = []string{DesignRing, DesignHashmod, DesignWeighted, DesignBoundedScratch, DesignBounded}

// PlacementReport runs every design at every size for uniform and skewed
// targets and returns the Markdown tables.
func PlacementReport(sizes []int, targets int, c PlacementConfig) string {
	c = c.withDefaults()
	p, w := c.Tokens.withDefaults(), c.Weights
	var b []byte
	b = fmt.Appendf(b, "%d targets with the same load model as the ring table (skewed: 2%% of targets 50x larger). "+
		"A round is one weight-update period (a minute: %d rounds per hour); in every round each node owns what the gossiped state gives it, "+
		"measures its load and publishes new state for the next round. "+
		"*weighted tokens*: `ring.NewWeighted`, each node's token count from its measured load (`sim.TokenPolicy`: the sum of its targets' smoothed loads, "+
		"dead band ±%.0f%% of the mean, gain %.2f, step at most ×%.2f, %d–%d tokens). "+
		"*bounded load, from scratch*: `ring.NewBounded` on today's ring with c = %.2f (the heaviest weight class first, key order within a class, each target to the first node clockwise "+
		"whose load stays within c × the mean; what shoal did before it placed from the current owners, and still does while a participant of an older version takes part) "+
		"over the targets whose weights their owners published (`ring.WeightPolicy`: first published after %d measurements, "+
		"smoothing %.2f, republished only when the estimate leaves ±%.0f%%). "+
		"*bounded load*: `ring.NewSticky`, the same weights and bound placed from the current owners (the publishers): a target stays at home or with its owner while they stay within the bound, "+
		"goes home while its home is below the mean, and otherwise walks to the first node below halfway between the mean and the bound. "+
		"Balance is measured once converged, without noise; \"at once\" is the first round after the change, \"settled\" sums every move until the published state stops changing "+
		"(join and leave each averaged over %d different joining and leaving nodes, so today's ring differs slightly from the ring table's average over 10); "+
		"churn is one hour of steady state with every target's load redrawn every round within ±%.0f%%, and \"worst\" is the worst max/mean samples "+
		"during that hour. With one scrape interval for every target, series and samples/s are the same measure.\n\n",
		targets, c.HourRounds, 100*p.Tolerance, p.Gain, p.MaxStep, p.MinTokens, p.MaxTokens, c.BoundC, w.MinSamples, w.Smoothing, 100*w.Tolerance, c.Leavers, 100*c.Noise)
	shapes := []struct {
		name        string
		skew, large float64
	}{
		{"uniform", 0, 0},
		{"skewed (2% of targets 50x larger)", 50, 0.02},
	}
	for _, sh := range shapes {
		ts := Targets(targets, 100, sh.skew, sh.large)
		b = fmt.Appendf(b, "**%s targets**\n\n", sh.name)
		b = append(b, "| design | nodes | max/mean targets | max/mean samples | rounds to converge | samples moved on join: at once / settled (1/N) | on leave: at once / settled | rounds to settle | churn per hour | worst max/mean samples in the hour |\n"...)
		b = append(b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"...)
		for _, d := range Designs {
			for _, n := range sizes {
				r := SimulatePlacement(d, n, ts, c)
				b = fmt.Appendf(b, "| %s | %d | %.3f | %.3f | %s | %.2f%% / %.2f%% (%.2f%%) | %.2f%% / %.2f%% | %d | %.2f%% | %.3f |\n",
					d, n, r.MaxMeanTargets, r.MaxMeanSamples, rounds(r.ConvergeRounds, c.MaxRounds),
					100*r.JoinNow, 100*r.JoinSettled, 100/float64(n), 100*r.LeaveNow, 100*r.LeaveSettled,
					r.SettleRounds, 100*r.ChurnPerHour, r.WorstNoisy)
			}
		}
		b = append(b, '\n')
	}

	ts := Targets(targets, 100, 50, 0.02)
	b = append(b, "**While views disagree** (skewed targets; half of the nodes hold one view, half the other). "+
		"*1% of targets*: a discovery update has reached only half of the nodes — orphans and duplicates among the 99% every node sees, then among the 1%. "+
		"*state*: the largest target doubled and the state published in answer (its weight, or its owner's token count) has reached only half; today's ring and hashmod publish nothing. *join*: only half have seen a new node. "+
		"*gated*: the same with shoal's hand-off gate, where a node does not start a target it gained while a peer follows another placement (the owner from before keeps it if its own view does): no duplicates, orphans until the views agree. Counts are targets.\n\n"...)
	b = append(b, "| design | nodes | 1% of targets: common orphaned / duplicated | 1% of targets: partial orphaned / duplicated | state: moved, orphaned / duplicated | state gated: orphaned / duplicated | join: orphaned / duplicated | join gated: orphaned / duplicated |\n"...)
	b = append(b, "|---|---:|---:|---:|---:|---:|---:|---:|\n"...)
	for _, d := range append(slices.Clone(Designs), DesignBoundedLocal) {
		for _, n := range sizes {
			r := SimulateDisagreement(d, n, ts, c)
			b = fmt.Appendf(b, "| %s | %d | %d / %d | %d / %d | %d, %d / %d | %d / %d | %d / %d | %d / %d |\n", d, n,
				r.TargetsCommonOrphans, r.TargetsCommonDups, r.TargetsPartialOrphans, r.TargetsPartialDups,
				r.WeightsMoved, r.WeightsOrphans, r.WeightsDups, r.WeightsGatedOrphans, r.WeightsGatedDups,
				r.JoinOrphans, r.JoinDups, r.JoinGatedOrphans, r.JoinGatedDups)
		}
	}
	b = append(b, '\n')
	return string(b)
}

func rounds(r, limit int) string {
	if r > limit {
		return fmt.Sprintf("> %d", limit)
	}
	return strconv.Itoa(r)
}
