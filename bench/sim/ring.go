// Package sim holds the in-process simulations behind docs/BENCHMARKS.md:
// how evenly shoal's ring spreads targets and samples, how many targets move
// when a node joins or leaves, and how fast gossip converges.
package sim

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/shoal-dev/shoal/bench/loadgen"
	"github.com/shoal-dev/shoal/ring"
	"github.com/shoal-dev/shoal/scrape"
)

// Target is one synthetic target: its ring key and how many samples a
// scrape of it yields.
type Target struct {
	Key     uint64
	Samples int
}

// Targets returns n targets with realistic identities (job names and
// pod-like URLs) whose sizes follow the load generator's model: all equal
// (skew <= 1), or a share largeFraction of them skew times larger.
func Targets(n, series int, skew, largeFraction float64) []Target {
	sizes := loadgen.Config{Targets: n, Series: series, Skew: skew, LargeFraction: largeFraction}.Sizes()
	jobs := []string{"node", "kubelet", "cadvisor", "kube-state-metrics", "app-api", "app-worker", "postgres", "redis", "envoy", "coredns"}
	out := make([]Target, n)
	for i := range out {
		job := jobs[i%len(jobs)]
		url := "http://10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":" +
			strconv.Itoa(9100+i%len(jobs)) + "/metrics"
		out[i] = Target{Key: scrape.TargetKeyString(job, url), Samples: sizes[i]}
	}
	return out
}

// NodeNames returns n StatefulSet-like node names.
func NodeNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "shoal-" + strconv.Itoa(i)
	}
	return out
}

// Balance is how evenly one ring spreads targets.
type Balance struct {
	Nodes int
	// MaxMeanTargets and MaxMeanSamples are the most loaded node's count
	// divided by the mean: 1.0 is perfect.
	MaxMeanTargets, MaxMeanSamples float64
	// MinMeanTargets is the least loaded node's count divided by the mean.
	MinMeanTargets float64
}

// Movement is what one membership change moves.
type Movement struct {
	Nodes int
	// Join: fraction of targets (and of samples) whose owner changes when
	// one node is added to Nodes nodes; the ideal is 1/(Nodes+1).
	JoinTargets, JoinSamples, JoinIdeal float64
	// Leave: the same when one of Nodes nodes leaves, averaged over every
	// node leaving in turn (or over 10 of them for large rings); the ideal
	// is 1/Nodes.
	LeaveTargets, LeaveSamples, LeaveIdeal float64
	// Collateral counts targets that moved between two nodes neither of
	// which joined or left: consistent hashing promises 0.
	Collateral int
	// HashModJoin is the fraction that moves on join with Prometheus-style
	// hashmod sharding (key mod N), for comparison.
	HashModJoin float64
}

func owners(r *ring.Ring, ts []Target) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = r.Primary(t.Key)
	}
	return out
}

// RingBalance places ts on a ring of nodes (tokens per node) and reports
// the spread.
func RingBalance(nodes []string, tokens int, ts []Target) Balance {
	r := ring.New(nodes, tokens)
	cnt := map[string]int{}
	smp := map[string]int{}
	total := 0
	for i, o := range owners(r, ts) {
		cnt[o]++
		smp[o] += ts[i].Samples
		total += ts[i].Samples
	}
	meanT := float64(len(ts)) / float64(len(nodes))
	meanS := float64(total) / float64(len(nodes))
	b := Balance{Nodes: len(nodes), MinMeanTargets: float64(len(ts))}
	for _, n := range nodes {
		b.MaxMeanTargets = max(b.MaxMeanTargets, float64(cnt[n])/meanT)
		b.MinMeanTargets = min(b.MinMeanTargets, float64(cnt[n])/meanT)
		b.MaxMeanSamples = max(b.MaxMeanSamples, float64(smp[n])/meanS)
	}
	return b
}

// RingMovement measures join and leave on a ring of nodes.
func RingMovement(nodes []string, tokens int, ts []Target) Movement {
	n := len(nodes)
	m := Movement{Nodes: n, JoinIdeal: 1 / float64(n+1), LeaveIdeal: 1 / float64(n)}
	total := 0
	for _, t := range ts {
		total += t.Samples
	}
	before := owners(ring.New(nodes, tokens), ts)

	joiner := "shoal-" + strconv.Itoa(n)
	after := owners(ring.New(append(slices.Clone(nodes), joiner), tokens), ts)
	mt, ms := 0, 0
	for i := range ts {
		if before[i] != after[i] {
			mt++
			ms += ts[i].Samples
			if after[i] != joiner {
				m.Collateral++
			}
		}
	}
	m.JoinTargets = float64(mt) / float64(len(ts))
	m.JoinSamples = float64(ms) / float64(total)

	leavers := nodes
	if len(leavers) > 10 {
		leavers = leavers[:10]
	}
	var sumT, sumS float64
	for _, leaver := range leavers {
		rest := slices.DeleteFunc(slices.Clone(nodes), func(s string) bool { return s == leaver })
		after := owners(ring.New(rest, tokens), ts)
		mt, ms := 0, 0
		for i := range ts {
			if before[i] != after[i] {
				mt++
				ms += ts[i].Samples
				if before[i] != leaver {
					m.Collateral++
				}
			}
		}
		sumT += float64(mt) / float64(len(ts))
		sumS += float64(ms) / float64(total)
	}
	m.LeaveTargets = sumT / float64(len(leavers))
	m.LeaveSamples = sumS / float64(len(leavers))

	hm := 0
	for _, t := range ts {
		if t.Key%uint64(n) != t.Key%uint64(n+1) {
			hm++
		}
	}
	m.HashModJoin = float64(hm) / float64(len(ts))
	return m
}

// RingReport runs the balance and movement simulations for each ring size
// and target shape and returns them as Markdown.
func RingReport(sizes []int, tokens, targets int) string {
	shapes := []struct {
		name        string
		skew, large float64
	}{
		{"uniform", 0, 0},
		{"skewed (2% of targets 50x larger)", 50, 0.02},
	}
	var b []byte
	b = fmt.Appendf(b, "%d targets, %d tokens per node, replication factor 1; keys are xxhash64(job+\"\\xff\"+url) of synthetic pod URLs. "+
		"Balance is the most (least) loaded node over the mean; \"moved\" is the fraction whose owner changes, ideal 1/(N+1) on join and 1/N on leave "+
		"(leave averaged over up to 10 different leaving nodes). \"Collateral\" counts targets moved between two nodes that did not change (must be 0). "+
		"hashmod is Prometheus-style `hashmod` sharding (key mod N) for comparison.\n\n", targets, tokens)
	for _, sh := range shapes {
		ts := Targets(targets, 100, sh.skew, sh.large)
		b = fmt.Appendf(b, "**%s targets**\n\n", sh.name)
		b = append(b, "| nodes | max/mean targets | min/mean targets | max/mean samples | moved on join (ideal) | samples moved on join | moved on leave (ideal) | samples moved on leave | collateral | hashmod moved on join |\n"...)
		b = append(b, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"...)
		for _, n := range sizes {
			names := NodeNames(n)
			bal := RingBalance(names, tokens, ts)
			mv := RingMovement(names, tokens, ts)
			b = fmt.Appendf(b, "| %d | %.3f | %.3f | %.3f | %.2f%% (%.2f%%) | %.2f%% | %.2f%% (%.2f%%) | %.2f%% | %d | %.1f%% |\n",
				n, bal.MaxMeanTargets, bal.MinMeanTargets, bal.MaxMeanSamples,
				100*mv.JoinTargets, 100*mv.JoinIdeal, 100*mv.JoinSamples,
				100*mv.LeaveTargets, 100*mv.LeaveIdeal, 100*mv.LeaveSamples, mv.Collateral, 100*mv.HashModJoin)
		}
		b = append(b, '\n')
	}
	return string(b)
}
