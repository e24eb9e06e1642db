package cluster

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/internal/testutil"
)

func TestWeightsEncodingRoundTripsAndRefusesGarbage(t *testing.T) {
	sets := map[string]NodeWeights{
		"a": {Incarnation: 42, Version: 3, Weights: map[uint64]float64{1: 2.5, 0xffffffffffffffff: 1e6}},
		"b": {Incarnation: -1, Version: 1, Weights: map[uint64]float64{}},
	}
	got, err := decodeWeights(encodeWeights(sets))
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range sets {
		g := got[name]
		if g.Incarnation != w.Incarnation || g.Version != w.Version || !maps.Equal(g.Weights, w.Weights) {
			t.Fatalf("%s: got %+v, want %+v", name, g, w)
		}
	}
	good := encodeWeights(sets)
	for _, bad := range [][]byte{nil, {'x'}, good[:len(good)-3], append([]byte{msgWeights}, 0xff, 0xff)} {
		if _, err := decodeWeights(bad); err == nil {
			t.Errorf("decodeWeights(%x) took garbage", bad)
		}
	}
}

// Two real memberlist nodes: a published weight set reaches the peer, a
// newer one replaces it, and a peer that goes away takes its set along.
func TestWeightsTravelBetweenNodes(t *testing.T) {
	tn := newTestNet(t)
	nodes := startStatic(t, tn, 2, nil)
	a, b := nodes[0].Node, nodes[1].Node
	// Both ways: a sends its weights to the members it knows, and while it
	// does not know b yet it sends nothing (push/pull carries them, not
	// counted as a send).
	testutil.EventuallyTrue(t, 10*time.Second, "two nodes see each other", func() bool { return len(a.Peers()) == 2 && len(b.Peers()) == 2 })

	changes, unsubscribe := b.Subscribe()
	defer unsubscribe()
	a.SetWeights(map[uint64]float64{7: 100, 9: 0.1, 11: -1})
	want := map[uint64]float64{7: 100, 9: roundWeight(0.1)}
	seen := func(n *Node, from string, want map[uint64]float64) func() error {
		return func() error {
			w, ok := n.Weights()[from]
			if !ok || !maps.Equal(w.Weights, want) {
				return fmt.Errorf("%s sees %s's weights %v (published: %v), want %v", n.cfg.NodeName, from, w.Weights, ok, want)
			}
			return nil
		}
	}
	if err := seen(a, a.cfg.NodeName, want)(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "weights sent to the peer", seen(b, a.cfg.NodeName, want))
	select {
	case <-changes:
	default:
		t.Fatal("new weights did not notify subscribers")
	}
	for name, want := range map[string]float64{"shoal_cluster_weights_published": 2, "shoal_cluster_weights_sends_total": 1} {
		// The direct send may still be under way when push/pull has already
		// delivered the set; SendReliable is bounded by memberlist's TCP
		// timeout (10s), so wait past that.
		testutil.Eventually(t, 20*time.Second, name, func() error {
			if v, err := testutil.GatherValue(nodes[0].reg, name, map[string]string{}); err != nil || v < want {
				return fmt.Errorf("%s = %v (%v), want ≥ %v", name, v, err, want)
			}
			return nil
		})
	}

	// A newer set replaces the old one; b's own set travels the other way.
	a.SetWeights(map[uint64]float64{7: 50})
	b.SetWeights(map[uint64]float64{3: 4})
	testutil.Eventually(t, 10*time.Second, "newer weights replace older", seen(b, a.cfg.NodeName, map[uint64]float64{7: 50}))
	testutil.Eventually(t, 10*time.Second, "weights travel both ways", seen(a, b.cfg.NodeName, map[uint64]float64{3: 4}))

	// A stale set (older version) from anyone is ignored.
	b.mergeWeights(map[string]NodeWeights{a.cfg.NodeName: {Incarnation: a.startTime.UnixNano(), Version: 1, Weights: map[uint64]float64{1: 1}}})
	if err := seen(b, a.cfg.NodeName, map[uint64]float64{7: 50})(); err != nil {
		t.Fatalf("an older set replaced a newer one: %v", err)
	}

	// A node that leaves takes its weights along; they do not come back.
	if err := a.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, 10*time.Second, "peer gone", func() bool { return len(b.Peers()) == 1 })
	if _, ok := b.Weights()[a.cfg.NodeName]; ok {
		t.Fatal("a departed node's weights are still listed")
	}
	b.mergeWeights(map[string]NodeWeights{a.cfg.NodeName: {Incarnation: a.startTime.UnixNano(), Version: 99, Weights: map[uint64]float64{1: 1}}})
	if _, ok := b.Weights()[a.cfg.NodeName]; ok {
		t.Fatal("a departed node's weights came back through a peer")
	}
}

// The full state exchange alone (no direct send) carries every alive
// member's set, so a node that joins later learns them.
func TestWeightsReachLateJoinerByPushPull(t *testing.T) {
	tn := newTestNet(t)
	nodes := startStatic(t, tn, 2, nil)
	a, b := nodes[0].Node, nodes[1].Node
	testutil.EventuallyTrue(t, 10*time.Second, "two nodes see each other", func() bool { return len(b.Peers()) == 2 })
	a.SetWeights(map[uint64]float64{1: 10})
	b.SetWeights(map[uint64]float64{2: 20})
	testutil.EventuallyTrue(t, 10*time.Second, "a and b exchanged weights", func() bool { return len(a.Weights()) == 2 && len(b.Weights()) == 2 })

	cfg := testConfig(tn, 3)
	cfg.Join = []string{tn.addr(2)}
	c := startNode(t, cfg).Node
	testutil.Eventually(t, 10*time.Second, "the late joiner learns both sets", func() error {
		w := c.Weights()
		if len(w[a.cfg.NodeName].Weights) != 1 || len(w[b.cfg.NodeName].Weights) != 1 {
			return fmt.Errorf("c sees %v", w)
		}
		return nil
	})
}

// A node that (re)joins sends its set to every member at once over TCP; a
// member that hears of the join by gossip only after that send must keep
// the set and list it as soon as the node is alive. Dropped, the set came
// only with the next push/pull, and in the meantime that member placed
// another generation than the others (seen in a rolling restart of the
// bounded placement: 15s of disagreement and two scrapers of one target).
func TestWeightsSentBeforeTheJoinIsKnownAreKept(t *testing.T) {
	tn := newTestNet(t)
	a := startStatic(t, tn, 1, nil)[0].Node

	cfg := testConfig(tn, 2)
	cfg.Join = []string{tn.addr(1)}
	c, err := New(cfg, testLogger(t, cfg.NodeName), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]float64{5: 50}
	a.mergeWeights(map[string]NodeWeights{cfg.NodeName: {Incarnation: c.startTime.UnixNano(), Version: 1, Weights: want}})
	if _, ok := a.Weights()[cfg.NodeName]; ok {
		t.Fatal("the set of a node that is not a member yet is listed")
	}
	changes, unsubscribe := a.Subscribe()
	defer unsubscribe()
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Shutdown() })
	// c publishes nothing itself: only the early message can give a its set.
	testutil.Eventually(t, 10*time.Second, "the early set listed once the sender is a member", func() error {
		if w, ok := a.Weights()[cfg.NodeName]; !ok || !maps.Equal(w.Weights, want) {
			return fmt.Errorf("a sees %v (members: %s)", a.Weights(), view(a))
		}
		return nil
	})
	select {
	case <-changes:
	default:
		t.Fatal("the join that made the set current did not notify subscribers")
	}

	// A set of a node that never shows up is forgotten with the departed ones.
	a.mergeWeights(map[string]NodeWeights{"stranger": {Incarnation: 1, Version: 1, Weights: want}})
	a.mu.Lock()
	a.pruneWeightsLocked(time.Now().Add(weightsKeep + time.Second))
	_, kept := a.weights["stranger"]
	a.mu.Unlock()
	if kept {
		t.Fatal("the set of a node that never joined is kept forever")
	}
}
