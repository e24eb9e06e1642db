package harness

import (
	"math"
	"slices"
)

// Order returns the order in which n agents run in round r (0-based), as
// indexes into the agent list. Even rounds run forwards, odd rounds run the
// previous round backwards, and every second round starts one agent later:
// for four agents A B C D that is ABCD, DCBA, BCDA, ADCB, CDAB, ... With a
// steady drift in the machine's load (another job starting, the page cache
// filling), forwards then backwards gives every pair of agents both
// positions, and the rotation keeps one agent from always running first.
func Order(n, r int) []int {
	out := make([]int, n)
	if n == 0 {
		return out
	}
	shift := (r / 2) % n
	for i := range out {
		out[i] = (i + shift) % n
	}
	if r%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

// Spread summarises one metric over rounds: the median and the range.
type Spread struct {
	Median, Min, Max float64
	// N is how many rounds gave a value (NaN values are left out).
	N int
}

// SpreadOf returns the median, minimum and maximum of the finite values in
// vals; all NaN when there is none. The median of an even count is the mean
// of the two middle values.
func SpreadOf(vals []float64) Spread {
	var v []float64
	for _, x := range vals {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Spread{Median: m, Min: v[0], Max: v[len(v)-1], N: len(v)}
}

// RelSpread is (max − min) / median: how far apart the rounds were,
// relative to the figure reported.
func (s Spread) RelSpread() float64 {
	if s.N == 0 || s.Median == 0 {
		return math.NaN()
	}
	return (s.Max - s.Min) / s.Median
}

// Summary is one agent over all rounds of a side-by-side run.
type Summary struct {
	Agent   Agent
	Version string
	// Rounds holds every round's result, failed ones included, in round
	// order.
	Rounds []Result
	// OK counts the rounds that measured something.
	OK int

	ActiveSeries   int
	ExpectedPerSec float64
	SamplesPerSec  Spread
	SeriesSeen     Spread
	CPUPerMillion  Spread
	CoresUsed      Spread
	RSSSteady      Spread // bytes, summed over processes
	RSSPeak        Spread
	BytesPerSeries Spread // steady RSS per active series
	PeakPerSeries  Spread
	LagP50, LagP99 Spread
	FreshMax       Spread
	Rejected       int64 // summed over rounds
	HarnessCores   Spread
	// Mem is the runtime memory breakdown of the round whose steady RSS is
	// the median (the first one that has a breakdown at all when none does).
	Mem MemBreakdown
}

// Summarize folds each agent's rounds into medians and ranges.
// perAgent[i] holds agent i's results, one per round.
func Summarize(perAgent [][]Result) []Summary {
	out := make([]Summary, 0, len(perAgent))
	for _, rs := range perAgent {
		if len(rs) == 0 {
			continue
		}
		s := Summary{Agent: rs[0].Agent, Version: rs[0].Version, Rounds: rs, ActiveSeries: rs[0].ActiveSeries, ExpectedPerSec: rs[0].ExpectedPerSec}
		col := func(f func(Result) float64) Spread {
			var v []float64
			for _, r := range rs {
				if r.Err == "" {
					v = append(v, f(r))
				}
			}
			return SpreadOf(v)
		}
		for _, r := range rs {
			if r.Err == "" {
				s.OK++
				s.Rejected += r.Rejected
			}
		}
		s.SamplesPerSec = col(func(r Result) float64 { return r.SamplesPerSec })
		s.SeriesSeen = col(func(r Result) float64 { return float64(r.SeriesSeen) })
		s.CPUPerMillion = col(func(r Result) float64 { return r.CPUPerMillion })
		s.CoresUsed = col(func(r Result) float64 { return r.CoresUsed() })
		s.RSSSteady = col(func(r Result) float64 { return float64(r.RSSSteady) })
		s.RSSPeak = col(func(r Result) float64 { return float64(r.RSSPeak) })
		s.BytesPerSeries = col(func(r Result) float64 { st, _ := r.BytesPerSeries(); return st })
		s.PeakPerSeries = col(func(r Result) float64 { _, pk := r.BytesPerSeries(); return pk })
		s.LagP50 = col(func(r Result) float64 { return r.LagP50 })
		s.LagP99 = col(func(r Result) float64 { return r.LagP99 })
		s.FreshMax = col(func(r Result) float64 { return r.FreshMax })
		s.HarnessCores = col(func(r Result) float64 {
			if r.Window <= 0 {
				return math.NaN()
			}
			return r.HarnessCPU.Seconds() / r.Window.Seconds()
		})
		best := math.Inf(1)
		for _, r := range rs {
			if r.Err != "" || !r.Mem.OK {
				continue
			}
			if d := math.Abs(float64(r.RSSSteady) - s.RSSSteady.Median); d < best {
				best, s.Mem = d, r.Mem
			}
		}
		out = append(out, s)
	}
	return out
}
