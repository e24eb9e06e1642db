package sim

import (
	"math"

	"github.com/shoal-dev/shoal/ring"
)

func clampTokens(t int) int {
	switch {
	case t <= 0:
		return ring.DefaultTokensPerNode
	case t > ring.MaxTokensPerNode:
		return ring.MaxTokensPerNode
	}
	return t
}

// TokenPolicy is the weighted-tokens design that the simulation compares
// with bounded loads (it is not shoal's placement): it turns the load a
// node measures into the token count it gossips for ring.NewWeighted. Each node runs it for itself only, once
// per update period, on its own smoothed load and the mean of the smoothed
// loads its peers gossip; every node then builds the ring from everyone's
// gossiped counts with ring.NewWeighted. The policy is pure: the same inputs
// always give the same count.
//
// Load is whatever unit the caller measures consistently on every node
// (samples per second is what shoal uses). Zero fields mean the value of
// DefaultTokenPolicy.
type TokenPolicy struct {
	// Smoothing is the weight of a new measurement in the exponentially
	// weighted moving average kept by Smooth, in (0, 1].
	Smoothing float64
	// Tolerance is the dead band: while a node's load is within
	// mean × (1 ± Tolerance) its count does not change. Once outside, the
	// step aims at the mean, not at the band's edge, so noise has to cross
	// the whole band again before the next change: hysteresis, no flapping.
	Tolerance float64
	// GrowTolerance is the dead band below the mean (default Tolerance):
	// a larger value makes under-loaded nodes slower to take more.
	GrowTolerance float64
	// Gain is the share of the error (in log space) corrected in one step:
	// below 1 damps the overshoot of all nodes adjusting at once.
	Gain float64
	// MaxStep bounds the factor by which a count changes in one step.
	MaxStep float64
	// MinTokens and MaxTokens bound the count (MaxTokens at most
	// ring.MaxTokensPerNode).
	MinTokens, MaxTokens int
}

// DefaultTokenPolicy is the best setting found for the weighted-tokens
// design (a sweep of tolerance, gain, step and smoothing at 30 and 100
// nodes; see docs/DESIGN.md, "Placement").
func DefaultTokenPolicy() TokenPolicy {
	return TokenPolicy{
		Smoothing: 0.3,
		Tolerance: 0.10,
		Gain:      0.5,
		MaxStep:   1.1,
		MinTokens: 16,
		MaxTokens: 2048,
	}
}

func (p TokenPolicy) withDefaults() TokenPolicy {
	d := DefaultTokenPolicy()
	if p.Smoothing <= 0 || p.Smoothing > 1 {
		p.Smoothing = d.Smoothing
	}
	if p.Tolerance <= 0 {
		p.Tolerance = d.Tolerance
	}
	if p.GrowTolerance <= 0 {
		p.GrowTolerance = p.Tolerance
	}
	if p.Gain <= 0 {
		p.Gain = d.Gain
	}
	if p.MaxStep <= 1 {
		p.MaxStep = d.MaxStep
	}
	if p.MinTokens <= 0 {
		p.MinTokens = d.MinTokens
	}
	if p.MaxTokens <= 0 {
		p.MaxTokens = d.MaxTokens
	}
	p.MaxTokens = min(p.MaxTokens, ring.MaxTokensPerNode)
	p.MinTokens = min(p.MinTokens, p.MaxTokens)
	return p
}

// Smooth folds one measurement into the moving average prev and returns
// the new estimate. Start a new estimate with prev equal to the first
// measurement. Negative or non-finite measurements are ignored.
func (p TokenPolicy) Smooth(prev, measured float64) float64 {
	p = p.withDefaults()
	if measured < 0 || math.IsNaN(measured) || math.IsInf(measured, 0) {
		return prev
	}
	if prev < 0 || math.IsNaN(prev) || math.IsInf(prev, 0) {
		return measured
	}
	return prev + p.Smoothing*(measured-prev)
}

// Next returns the token count a node with cur tokens should gossip next,
// given its smoothed load and the mean smoothed load of the participants
// (itself included). The count changes only when load is outside
// mean × (1 ± Tolerance); it then moves by (mean/load)^Gain, at most by a
// factor MaxStep, within [MinTokens, MaxTokens]. A node with no load grows
// by MaxStep; with no load anywhere (mean <= 0) nothing changes.
func (p TokenPolicy) Next(cur int, load, mean float64) int {
	p = p.withDefaults()
	cur = min(max(clampTokens(cur), p.MinTokens), p.MaxTokens)
	if !(mean > 0) || load < 0 || math.IsNaN(load) || math.IsInf(mean, 0) || math.IsInf(load, 0) {
		return cur
	}
	ratio := load / mean
	if ratio >= 1 && ratio-1 <= p.Tolerance || ratio < 1 && 1-ratio <= p.GrowTolerance {
		return cur
	}
	factor := p.MaxStep
	if ratio > 0 {
		factor = math.Pow(ratio, -p.Gain)
	}
	factor = min(max(factor, 1/p.MaxStep), p.MaxStep)
	next := int(math.Round(float64(cur) * factor))
	// A step outside the band always moves, even where rounding would not.
	if next == cur {
		if ratio > 1 {
			next--
		} else {
			next++
		}
	}
	return min(max(next, p.MinTokens), p.MaxTokens)
}

// JoinTokens is the count a node gossips when it joins: the rounded mean of
// the participants' counts (zero entries count as ring.DefaultTokensPerNode), so
// that it starts with about 1/(N+1) of the key space whatever the others
// have drifted to; ring.DefaultTokensPerNode when it is alone.
func (p TokenPolicy) JoinTokens(peers []int) int {
	p = p.withDefaults()
	if len(peers) == 0 {
		return min(max(ring.DefaultTokensPerNode, p.MinTokens), p.MaxTokens)
	}
	sum := 0
	for _, t := range peers {
		sum += clampTokens(t)
	}
	mean := int(math.Round(float64(sum) / float64(len(peers))))
	return min(max(mean, p.MinTokens), p.MaxTokens)
}
