package cluster

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/internal/testutil"
)

func TestWeightsDeltaRoundTripsAndRefusesGarbage(t *testing.T) {
	old := map[uint64]float64{1: 1, 2: 2, 3: 3}
	cur := NodeWeights{Incarnation: 7, Version: 5, Weights: map[uint64]float64{1: 1, 2: 4, 9: 9}}
	d := diffWeights("a", 4, old, cur)
	got, err := decodeDelta(encodeDelta(d))
	if err != nil {
		t.Fatal(err)
	}
	if got.name != "a" || got.incarnation != 7 || got.base != 4 || got.version != 5 ||
		!maps.Equal(got.set, map[uint64]float64{2: 4, 9: 9}) || len(got.dropped) != 1 || got.dropped[0] != 3 {
		t.Fatalf("delta decoded as %+v", got)
	}
	good := encodeDelta(d)
	for _, bad := range [][]byte{good[:len(good)-1], append(good, 0), encodeDelta(weightsDelta{name: "a", base: 3, version: 3})} {
		if _, err := decodeDelta(bad); err == nil {
			t.Errorf("decodeDelta(%x) took garbage", bad)
		}
	}
	from, vs, err := decodeSummary(encodeSummary("x", map[string]NodeWeights{"a": cur}))
	if err != nil || from != "x" || vs["a"] != (weightsVersion{7, 5}) {
		t.Fatalf("summary decoded as %q %v %v", from, vs, err)
	}
	from, names, err := decodeWant(encodeWant("x", []string{"a", "b"}))
	if err != nil || from != "x" || len(names) != 2 {
		t.Fatalf("want decoded as %q %v %v", from, names, err)
	}

	tn := newTestNet(t)
	cfg := testConfig(tn, 1)
	reg := prometheus.NewRegistry()
	n, err := New(cfg, testLogger(t, cfg.NodeName), reg)
	if err != nil {
		t.Fatal(err)
	}
	for i, bad := range [][]byte{{msgWeightsSummary}, {msgWeightsWant, 5, 'a'}, {'z'}, nil} {
		n.receiveWeights(bad)
		if v, err := testutil.GatherValue(reg, "shoal_cluster_bad_peer_weights_total", map[string]string{}); err != nil || v != float64(i+1) {
			t.Errorf("receiveWeights(%x): bad weights counter %v (%v), want %d", bad, v, err, i+1)
		}
	}
}

// Once a peer has a set, a change travels as a delta: the peer ends with
// exactly the publisher's set. A peer that missed a publication (a delta
// whose base it does not hold) asks the publisher for its whole set and
// gets it.
func TestWeightsDeltasTravelAndAGapIsRepaired(t *testing.T) {
	tn := newTestNet(t)
	nodes := startStatic(t, tn, 2, nil)
	a, b := nodes[0].Node, nodes[1].Node
	testutil.EventuallyTrue(t, 10*time.Second, "two nodes see each other", func() bool { return len(b.Peers()) == 2 })
	seen := func(want map[uint64]float64, version uint64) func() error {
		return func() error {
			w := b.Weights()[a.cfg.NodeName]
			if w.Version != version || !maps.Equal(w.Weights, want) {
				return fmt.Errorf("b holds version %d %v, want version %d %v", w.Version, w.Weights, version, want)
			}
			return nil
		}
	}
	set := map[uint64]float64{}
	for k := range uint64(1000) {
		set[k] = float64(k + 1)
	}
	a.SetWeights(set)
	testutil.Eventually(t, 10*time.Second, "first publication", seen(set, 1))

	// One weight changes, one key goes, one comes.
	next := maps.Clone(set)
	next[5] = 42
	delete(next, 6)
	next[5000] = 1
	a.SetWeights(next)
	testutil.Eventually(t, 10*time.Second, "delta applied", seen(next, 2))
	d := diffWeights(a.cfg.NodeName, 1, set, NodeWeights{Incarnation: 1, Version: 2, Weights: next})
	if size := len(encodeDelta(d)); size > 100 {
		t.Errorf("a delta of three changes takes %d bytes", size)
	}

	// b misses version 3: a delta from 3 to 4 cannot apply, so b asks.
	a.mu.Lock()
	inc := a.ownWeights.Incarnation
	a.mu.Unlock()
	third := maps.Clone(next)
	third[7] = 77
	a.SetWeights(third) // version 3, sent as a delta 2 → 3 as well
	testutil.Eventually(t, 10*time.Second, "version 3", seen(third, 3))
	b.mu.Lock()
	b.weights[a.cfg.NodeName] = NodeWeights{Incarnation: inc, Version: 1, Weights: set}
	b.mu.Unlock()
	b.applyDelta(weightsDelta{name: a.cfg.NodeName, incarnation: inc, base: 3, version: 4, set: map[uint64]float64{8: 8}})
	testutil.Eventually(t, 10*time.Second, "the whole set fetched after a gap", seen(third, 3))
}

// A push/pull carries whole sets only to a joining node; otherwise a
// summary whose size does not depend on the number of targets.
func TestWeightsPushPullSummaryDoesNotGrowWithTargets(t *testing.T) {
	tn := newTestNet(t)
	cfg := testConfig(tn, 1)
	n, err := New(cfg, testLogger(t, cfg.NodeName), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[int][2]int{}
	for _, targets := range []int{10, 10000} {
		ws := map[uint64]float64{}
		for k := range targets {
			ws[uint64(k)] = 1
		}
		n.SetWeights(ws)
		sizes[targets] = [2]int{len(n.localWeightsState(false)), len(n.localWeightsState(true))}
	}
	if sizes[10][0] != sizes[10000][0] {
		t.Errorf("summary of 10 targets %d bytes, of 10000 targets %d", sizes[10][0], sizes[10000][0])
	}
	if sizes[10000][1] < 12*10000 {
		t.Errorf("the state for a joining node is %d bytes, not every weight", sizes[10000][1])
	}
}

// BenchmarkWeightsGossipBytes reports the bytes of the weights gossip for
// 10 nodes sharing 10k, 100k and 1M targets: what a push/pull carried
// before deltas (every set whole) and carries now (a summary, or every set
// for a joining node), and a delta publication for one weight change and
// for 1% of a node's weights changing (sent to each peer).
func BenchmarkWeightsGossipBytes(b *testing.B) {
	const nodes = 10
	for _, targets := range []int{10_000, 100_000, 1_000_000} {
		b.Run(strconv.Itoa(targets), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, uint64(targets)))
			sets := map[string]NodeWeights{}
			for i := range nodes {
				ws := make(map[uint64]float64, targets/nodes)
				for range targets / nodes {
					ws[rng.Uint64()] = roundWeight(1 + 100*rng.Float64())
				}
				sets["shoal-"+strconv.Itoa(i)] = NodeWeights{Incarnation: 1, Version: 1, Weights: ws}
			}
			own := sets["shoal-0"]
			one := maps.Clone(own.Weights)
			for k := range one {
				one[k] *= 2
				break
			}
			pct := maps.Clone(own.Weights)
			i := 0
			for k := range pct {
				if i++; i > len(pct)/100 {
					break
				}
				pct[k] *= 2
			}
			var full, summary, d1, dpct int
			for b.Loop() {
				full = len(encodeWeights(sets))
				summary = len(encodeSummary("shoal-0", sets))
				d1 = len(encodeDelta(diffWeights("shoal-0", 1, own.Weights, NodeWeights{Incarnation: 1, Version: 2, Weights: one})))
				dpct = len(encodeDelta(diffWeights("shoal-0", 1, own.Weights, NodeWeights{Incarnation: 1, Version: 2, Weights: pct})))
			}
			b.ReportMetric(float64(full), "full-B/pushpull")
			b.ReportMetric(float64(summary), "summary-B/pushpull")
			b.ReportMetric(float64(d1), "delta-B/1change")
			b.ReportMetric(float64(dpct), "delta-B/1%change")
		})
	}
}
