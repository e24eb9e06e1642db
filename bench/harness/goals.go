package harness

import (
	"fmt"
	"math"
	"time"
)

// GrowthPoint is one point of the memory-growth curve: every agent
// measured against the same number of active series.
type GrowthPoint struct {
	Series   int
	Targets  int
	Interval time.Duration
	Rounds   int // per agent
	Agents   []Summary
}

// GoalInputs are the parts of one run the goals are judged on; a part that
// did not run is nil.
type GoalInputs struct {
	Side   []Summary
	Idle   []Result
	Growth []GrowthPoint
}

// Goal is one of the performance goals, judged on one run.
type Goal struct {
	// What is measured, e.g. "CPU s per 1M samples, shoal ÷ prometheus --agent".
	What string
	// Limit is the most the value may be; Unit says how both read ("×" for
	// a ratio, "MiB").
	Limit float64
	Unit  string
	// Value is NaN when the run did not measure it; Source says where the
	// value comes from, or why there is none.
	Value  float64
	Source string
}

// Measured reports whether the run gave a value.
func (g Goal) Measured() bool { return !math.IsNaN(g.Value) }

// Met reports whether the value is within the limit.
func (g Goal) Met() bool { return g.Measured() && g.Value <= g.Limit }

// Verdict is "met", "missed by N%" or "not measured".
func (g Goal) Verdict() string {
	switch {
	case !g.Measured():
		return "not measured"
	case g.Met():
		return "met"
	default:
		return fmt.Sprintf("missed by %.0f%%", 100*(g.Value/g.Limit-1))
	}
}

// The limits. A cluster is judged by its marginal cost: three processes
// pay three idle footprints (the binary's pages, the runtime), which say
// nothing about what clustering costs per series.
const (
	GoalRSSPerSeriesVsProm = 0.6
	GoalIdleRSSMiB         = 64
	GoalCPUVsProm          = 0.75
	GoalCPUVsVM            = 1.0
	GoalClusterVsSingle    = 1.1
)

// role picks the summary of one contestant: shoal with one replica, shoal
// with several, or a peer.
type role int

const (
	roleShoal role = iota
	roleShoalCluster
	roleProm
	roleVM
)

func (r role) matches(a Agent) bool {
	switch r {
	case roleShoal:
		return a.Kind == KindShoal && a.Replicas <= 1
	case roleShoalCluster:
		return a.Kind == KindShoal && a.Replicas > 1
	case roleProm:
		return a.Kind == KindPrometheus
	default:
		return a.Kind == KindVMAgent
	}
}

func find(ss []Summary, r role) (Summary, bool) {
	for _, s := range ss {
		if r.matches(s.Agent) && s.OK > 0 {
			return s, true
		}
	}
	return Summary{}, false
}

// near reports whether n is within 10% of want.
func near(n, want int) bool { return math.Abs(float64(n-want)) <= 0.1*float64(want) }

// EvaluateGoals judges the performance goals on one run. Memory goals compare
// steady RSS per active series (medians over rounds); at 100k series the
// side-by-side run is used when it had about 100k series (more rounds),
// the growth curve's point otherwise.
func EvaluateGoals(in GoalInputs) []Goal {
	nan := math.NaN()
	ratio := func(ss []Summary, a, b role, f func(Summary) Spread) (float64, string) {
		x, ok1 := find(ss, a)
		y, ok2 := find(ss, b)
		if !ok1 || !ok2 {
			return nan, "an agent was not measured"
		}
		return f(x).Median / f(y).Median, fmt.Sprintf("medians of %d and %d rounds", x.OK, y.OK)
	}
	rssPer := func(s Summary) Spread { return s.BytesPerSeries }
	cpuPer := func(s Summary) Spread { return s.CPUPerMillion }
	notRun := func(what string) (float64, string) { return nan, what + " did not run" }

	memAt := func(series int, label string) Goal {
		g := Goal{What: "steady RSS per active series at " + label + ", shoal ÷ prometheus --agent", Limit: GoalRSSPerSeriesVsProm, Unit: "×"}
		if len(in.Side) > 0 && near(in.Side[0].ActiveSeries, series) {
			v, src := ratio(in.Side, roleShoal, roleProm, rssPer)
			g.Value, g.Source = v, fmt.Sprintf("side by side (%d series), %s", in.Side[0].ActiveSeries, src)
			return g
		}
		for _, p := range in.Growth {
			if near(p.Series, series) {
				v, src := ratio(p.Agents, roleShoal, roleProm, rssPer)
				g.Value, g.Source = v, fmt.Sprintf("growth curve (%d series), %s", p.Series, src)
				return g
			}
		}
		g.Value, g.Source = nan, "no part of this run had about "+label+" series"
		return g
	}

	var out []Goal
	out = append(out, memAt(100_000, "100k"), memAt(1_000_000, "1M"))

	idle := Goal{What: "idle RSS of one shoal replica (10 targets)", Limit: GoalIdleRSSMiB, Unit: "MiB"}
	idle.Value, idle.Source = notRun("the idle point")
	for _, r := range in.Idle {
		if roleShoal.matches(r.Agent) {
			if r.Err != "" {
				idle.Source = "shoal failed: " + oneLine(r.Err)
				break
			}
			idle.Value, idle.Source = float64(r.RSSSteady)/(1<<20), fmt.Sprintf("idle point (%d targets, %d series)", r.Targets, r.ActiveSeries)
			break
		}
	}
	out = append(out, idle)

	side := func(what string, limit float64, a, b role, f func(Summary) Spread) Goal {
		g := Goal{What: what, Limit: limit, Unit: "×"}
		if len(in.Side) == 0 {
			g.Value, g.Source = notRun("the side-by-side run")
			return g
		}
		v, src := ratio(in.Side, a, b, f)
		g.Value, g.Source = v, "side by side, "+src
		return g
	}
	out = append(out,
		side("CPU s per 1M samples, shoal ÷ prometheus --agent", GoalCPUVsProm, roleShoal, roleProm, cpuPer),
		side("CPU s per 1M samples, shoal ÷ vmagent", GoalCPUVsVM, roleShoal, roleVM, cpuPer),
		side("CPU s per 1M samples, shoal x3 (summed) ÷ shoal", GoalClusterVsSingle, roleShoalCluster, roleShoal, cpuPer),
		marginalGoal(in, idle),
	)
	return out
}

// marginalGoal judges the memory a cluster adds per series: the steady RSS
// of the cluster above its idle footprint, per active series, over the same
// for one replica. An idle footprint is the idle point's RSS (10 targets,
// whose few series count as idle): the cluster's own where the idle point
// ran it, which holds what gossip costs a replica whatever its series,
// else that many times one replica's.
func marginalGoal(in GoalInputs, idle Goal) Goal {
	g := Goal{What: "RSS per active series above the idle footprint, shoal x3 ÷ shoal", Limit: GoalClusterVsSingle, Unit: "×", Value: math.NaN()}
	one, ok1 := find(in.Side, roleShoal)
	many, ok2 := find(in.Side, roleShoalCluster)
	switch {
	case len(in.Side) == 0:
		g.Source = "the side-by-side run did not run"
		return g
	case !ok1 || !ok2:
		g.Source = "an agent was not measured"
		return g
	case !idle.Measured():
		g.Source = "no idle footprint: " + idle.Source
		return g
	}
	idleOne := idle.Value * (1 << 20)
	idleMany, from := float64(many.Agent.Replicas)*idleOne, fmt.Sprintf("%d × one replica's", many.Agent.Replicas)
	for _, r := range in.Idle {
		if roleShoalCluster.matches(r.Agent) && r.Err == "" && r.RSSSteady > 0 {
			idleMany, from = float64(r.RSSSteady), "the cluster's"
			break
		}
	}
	above1 := one.RSSSteady.Median - idleOne
	aboveN := many.RSSSteady.Median - idleMany
	if above1 <= 0 {
		g.Source = "one replica's RSS is not above its idle footprint"
		return g
	}
	g.Value = aboveN / above1
	g.Source = fmt.Sprintf("side by side, medians of %d and %d rounds, less idle footprints of %.0f MiB (%s) and %.0f MiB", many.OK, one.OK, idleMany/(1<<20), from, idle.Value)
	return g
}
