package placement

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
	"github.com/shoal-dev/shoal/scrape"
)

// gossipNet is perfect, instant gossip of weight sets between the
// Coordinators of one test: what matters here is what each node computes
// from the state it has, not how the state travels (the cluster package's
// tests and e2e cover that).
type gossipNet struct {
	mu      sync.Mutex
	sets    map[string]cluster.NodeWeights
	members []*netCluster
}

type netCluster struct {
	*fakeCluster
	net *gossipNet
}

func (c *netCluster) SetWeights(w map[uint64]float64) {
	n := c.net
	n.mu.Lock()
	old := n.sets[c.self.Name]
	n.sets[c.self.Name] = cluster.NodeWeights{Incarnation: old.Incarnation, Version: old.Version + 1, Weights: maps.Clone(w)}
	members := slices.Clone(n.members)
	n.mu.Unlock()
	for _, m := range members {
		m.notify()
	}
}

// Weights returns the sets of the members this node sees alive.
func (c *netCluster) Weights() map[string]cluster.NodeWeights {
	alive := map[string]bool{}
	for _, p := range c.Peers() {
		alive[p.Name] = true
	}
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	out := map[string]cluster.NodeWeights{}
	for name, w := range c.net.sets {
		if alive[name] {
			out[name] = w
		}
	}
	return out
}

type boundedNode struct {
	name string
	c    *Coordinator
	cl   *netCluster
	reg  *prometheus.Registry
}

// startBounded starts one Coordinator per name in ModeBounded on a shared
// gossipNet; every node sees the others as participants.
func startBounded(t *testing.T, names []string) ([]*boundedNode, *gossipNet) {
	t.Helper()
	net := &gossipNet{sets: map[string]cluster.NodeWeights{}}
	var nodes []*boundedNode
	for _, name := range names {
		cl := &netCluster{fakeCluster: newFakeCluster(name), net: net}
		net.members = append(net.members, cl)
		n := &boundedNode{name: name, cl: cl, reg: prometheus.NewRegistry()}
		c, err := New(Options{NodeName: name, Tokens: 64, Placement: ModeBounded}, cl, &fakeFence{}, &fakeWAL{}, &fakeRemote{}, nil, n.reg)
		if err != nil {
			t.Fatal(err)
		}
		n.c = c
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		for _, o := range names {
			if o != n.name {
				n.cl.setPeer(participant(o, cluster.Watermarks{}))
			}
		}
		n.cl.becomeReady()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			n.c.Run(ctx)
		}()
		t.Cleanup(func() {
			cancel()
			<-done
			n.c.Close()
		})
	}
	return nodes, net
}

// scrapeRound has every node measure the targets it is primary of under
// the placement it follows, as its fence would, then lets a second pass.
func scrapeRound(nodes []*boundedNode, samples map[uint64]int, noise *rand.Rand) {
	for _, n := range nodes {
		p := n.c.Placement()
		if p == nil {
			continue
		}
		for k, s := range samples {
			if o := p.Owners(k, 1, nil); len(o) == 1 && o[0] == n.name {
				if noise != nil {
					s = int(float64(s) * (0.8 + 0.4*noise.Float64()))
				}
				n.c.Measured(scrape.Unit{Key: k}, s, time.Second)
			}
		}
	}
	time.Sleep(time.Second)
	synctest.Wait()
}

// skewed is 40 targets of 10 samples per scrape and 2 of 500 (50×).
func skewed() map[uint64]int {
	s := map[uint64]int{}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 42 {
		n := 10
		if i < 2 {
			n = 500
		}
		s[r.Uint64()] = n
	}
	return s
}

func placementOf(t *testing.T, n *boundedNode) *bounded {
	t.Helper()
	b, ok := n.c.Placement().(*bounded)
	if !ok {
		t.Fatalf("%s follows %T, want a bounded placement", n.name, n.c.Placement())
	}
	return b
}

// Every node computes the same owners from the same gossiped state, every
// target with a weight is placed, and no node is above the bound.
func TestBoundedConvergesToOnePlacement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		names := []string{"a", "b", "c", "d"}
		nodes, _ := startBounded(t, names)
		samples := map[uint64]int{}
		r := rand.New(rand.NewPCG(3, 4))
		for i := range 200 {
			n := 10
			if i < 3 {
				n = 500
			}
			samples[r.Uint64()] = n
		}
		for range 60 {
			scrapeRound(nodes, samples, nil)
		}
		ref := placementOf(t, nodes[0])
		for _, n := range nodes[1:] {
			b := placementOf(t, n)
			if RingID(b) != RingID(ref) {
				t.Fatalf("%s follows generation %x, %s %x", n.name, RingID(b), nodes[0].name, RingID(ref))
			}
			for k := range samples {
				if o, want := b.Owners(k, 1, nil), ref.Owners(k, 1, nil); !slices.Equal(o, want) {
					t.Fatalf("key %x: %s says %v, %s says %v", k, n.name, o, nodes[0].name, want)
				}
			}
		}
		for k := range samples {
			if !ref.Placed(k) {
				t.Fatalf("key %x has no published weight after 60 scrapes", k)
			}
		}
		total := 0.0
		for _, s := range samples {
			total += float64(s)
		}
		for _, name := range names {
			if l := ref.Load(name); l > ref.Limit() {
				t.Errorf("%s carries %.0f samples/s, above the limit %.0f", name, l, ref.Limit())
			}
		}
		if want := ring.DefaultLoadBound * total / 4; ref.Limit() < want*0.999 || ref.Limit() > want*1.001 {
			t.Errorf("limit %.1f, want 1.10 × mean = %.1f (the weights are not the measured samples/s)", ref.Limit(), want)
		}
		// Each target is published by exactly one node: its primary.
		for _, n := range nodes {
			for k := range n.cl.Weights()[n.name].Weights {
				if o := ref.Owners(k, 1, nil); o[0] != n.name {
					t.Errorf("%s still publishes %x, owned by %v", n.name, k, o)
				}
			}
		}
		mode, loads, rate := nodes[0].c.Loads()
		if mode != ModeBounded || loads["a"].Load != ref.Load("a") || loads["a"].Limit != ref.Limit() || rate <= 0 {
			t.Errorf("Loads() = %s, %v, %v", mode, loads, rate)
		}
	})
}

// The placement depends on the gossiped state only, never on the order in
// which peers and their weight sets arrived. A node of this version places
// from the current owners, and its own set is part of that state: it
// publishes (adopts) what it owned on the way, so the order of events may
// leave it in another state; the placement it follows is then the one that
// state gives, and the same state gives the same placement. With a peer
// of an older version every order gives the same placement.
func TestBoundedSamePlacementFromAnyOrderOfEvents(t *testing.T) {
	sets := map[string]cluster.NodeWeights{}
	r := rand.New(rand.NewPCG(5, 6))
	for _, name := range []string{"b", "c", "d"} {
		ws := map[uint64]float64{}
		for i := range 30 {
			w := 10.0
			if i == 0 {
				w = 400
			}
			ws[r.Uint64()] = w
		}
		sets[name] = cluster.NodeWeights{Incarnation: 1, Version: 1, Weights: ws}
	}
	for _, older := range []bool{false, true} {
		t.Run(fmt.Sprintf("older-peer=%v", older), func(t *testing.T) {
			byState := map[uint64]uint64{} // the final state → its generation
			var first uint64
			for trial := range 8 {
				synctest.Test(t, func(t *testing.T) {
					h := start(t, Options{Placement: ModeBounded, Tokens: 64})
					h.cl.becomeReady()
					events := []func(){}
					for name, s := range sets {
						p := participant(name, cluster.Watermarks{})
						if older && name == "d" {
							p.Capabilities = 0
						}
						events = append(events,
							func() { h.cl.setPeer(p) },
							func() { h.cl.setWeights(name, s) })
					}
					rand.New(rand.NewPCG(uint64(trial), 9)).Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
					for _, e := range events {
						e()
						if trial%2 == 1 {
							synctest.Wait() // sometimes every event is seen alone
						}
					}
					synctest.Wait()
					p, _, _ := h.filter.last()
					b, ok := p.(*bounded)
					if !ok {
						t.Fatalf("filter got %T", p)
					}
					if b.sticky == older {
						t.Fatalf("sticky placement %v with a peer of an older version %v", b.sticky, older)
					}
					final := h.cl.Weights()
					u, ud, only := newWeigher(ring.DefaultWeightPolicy(), DefaultWeightPeriod, time.Now).union(final, setsDigest(final))
					if want := buildBounded(h.cl.Peers(), 64, 1, u, ud, final, only, placesSticky(h.cl.Peers())); RingID(b) != RingID(want) {
						t.Fatalf("trial %d: generation %x, the final state gives %x", trial, RingID(b), RingID(want))
					}
					// setsDigest names a state within one cluster (versions
					// count publications); across trials compare contents.
					state := uint64(0)
					for name, ws := range final {
						state ^= xxhash.Sum64String(name) * (digest(ws.Weights) | 1)
					}
					if g, ok := byState[state]; ok && g != RingID(b) {
						t.Fatalf("trial %d: generation %x, an earlier trial with the same state %x", trial, RingID(b), g)
					}
					byState[state] = RingID(b)
					if trial == 0 {
						first = RingID(b)
					} else if older && RingID(b) != first {
						t.Fatalf("trial %d: generation %x, first trial %x", trial, RingID(b), first)
					}
				})
			}
		})
	}
}

// ±20% noise on every scrape never changes a published weight once it is
// published: no new generation, so no target moves.
func TestBoundedHysteresisPreventsFlapping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, _ := startBounded(t, []string{"a", "b", "c"})
		samples := skewed()
		noise := rand.New(rand.NewPCG(7, 8))
		for range 60 {
			scrapeRound(nodes, samples, noise)
		}
		gens := func() (s float64) {
			for _, n := range nodes {
				s += testutil.ToFloat64(n.c.metrics.generations)
			}
			return s
		}
		before, id := gens(), RingID(placementOf(t, nodes[0]))
		for range 30 * 60 { // half an hour of 1s scrapes
			scrapeRound(nodes, samples, noise)
		}
		if g := gens(); g != before {
			t.Fatalf("%v new placements under ±20%% noise, want none", g-before)
		}
		if RingID(placementOf(t, nodes[0])) != id {
			t.Fatal("the generation changed under noise alone")
		}

		// A real change of size (a target doubling) is published.
		var big uint64
		for k, s := range samples {
			if s == 500 {
				big = k
			}
		}
		samples[big] = 1000
		for range 60 {
			scrapeRound(nodes, samples, nil)
		}
		if w := placementOf(t, nodes[0]).Load(""); w != 0 {
			t.Fatal("Load of an unknown node is not 0")
		}
		found := false
		for _, n := range nodes {
			if w, ok := n.cl.Weights()[n.name].Weights[big]; ok {
				found = true
				if w < 700 {
					t.Fatalf("a doubled target is still published at %v", w)
				}
			}
		}
		if !found {
			t.Fatal("nobody publishes the doubled target")
		}
	})
}

// A target's weight survives its owner's crash: the dead node's set stays
// placed for the grace period, the new owner adopts the weight at once, and
// so the target does not fall back to its plain-ring owner in between.
func TestBoundedWeightsSurviveCrashWithinGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, net := startBounded(t, []string{"a", "b", "c"})
		samples := skewed()
		for range 40 {
			scrapeRound(nodes, samples, nil)
		}
		var victim *boundedNode
		for _, n := range nodes {
			if len(n.cl.Weights()[n.name].Weights) > 0 {
				victim = n
				break
			}
		}
		lost := maps.Clone(victim.cl.Weights()[victim.name].Weights)
		// The victim dies: its set leaves gossip, its peers drop it.
		net.mu.Lock()
		delete(net.sets, victim.name)
		net.mu.Unlock()
		var survivors []*boundedNode
		for _, n := range nodes {
			if n != victim {
				n.cl.removePeer(victim.name)
				survivors = append(survivors, n)
			}
		}
		synctest.Wait()
		for _, n := range survivors {
			b := placementOf(t, n)
			for k, w := range lost {
				if !b.Placed(k) {
					t.Fatalf("%s: the dead node's target %x dropped out of the placed set", n.name, k)
				}
				o := b.Owners(k, 1, nil)[0]
				if got := net.sets[o].Weights[k]; got != w {
					t.Fatalf("new owner %s of %x publishes %v, want the dead node's %v at once", o, k, got, w)
				}
			}
			if v := testutil.ToFloat64(n.c.metrics.placed); int(v) != len(samples) {
				t.Fatalf("%s places %v weights, want %d", n.name, v, len(samples))
			}
		}
		// After the grace period the placement is the survivors' alone and
		// still places every target.
		for range int(3*DefaultWeightPeriod/time.Second) + 1 {
			scrapeRound(survivors, samples, nil)
		}
		b := placementOf(t, survivors[0])
		for k := range samples {
			if !b.Placed(k) {
				t.Fatalf("target %x unplaced after the grace period", k)
			}
		}
		if slices.Contains(b.Nodes(), victim.name) {
			t.Fatal("the dead node is still placed on")
		}
	})
}

// A node that loses a target (here: to a node that joins) keeps publishing
// it until the new owner does, so the placed set never lacks it.
func TestBoundedLostTargetStaysPublishedUntilNewOwnerPublishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{Placement: ModeBounded, Tokens: 64})
		h.cl.becomeReady()
		h.cl.setPeer(participant("b", cluster.Watermarks{}))
		synctest.Wait()
		p, _, _ := h.filter.last()
		var key uint64
		if !slices.Contains(p.Nodes(), "a") {
			t.Fatalf("a is not placed on: %v", p.Nodes())
		}
		for k := uint64(1); key == 0; k += 1 << 56 {
			if o := p.Owners(k, 1, nil); o[0] == "a" {
				key = k
			}
		}
		for range 12 {
			h.c.Measured(scrape.Unit{Key: key}, 100, time.Second)
		}
		time.Sleep(DefaultWeightPeriod)
		synctest.Wait()
		if w := h.cl.Weights()["a"].Weights[key]; w != 100 {
			t.Fatalf("a publishes %v for its target, want 100", w)
		}
		// b publishes targets of its own, so that key is not heavier than
		// a node's mean; then a node joins whose share of the ring has key:
		// its new home, below the mean, takes it.
		own := map[uint64]float64{}
		for i := range uint64(5) {
			own[0xf000000000000000+i] = 100
		}
		h.cl.setWeights("b", cluster.NodeWeights{Version: 1, Weights: own})
		x := ""
		for i := 0; x == ""; i++ {
			if n := fmt.Sprintf("x%d", i); ring.New([]string{"a", "b", n}, 64).Primary(key) == n {
				x = n
			}
		}
		h.cl.setPeer(participant(x, cluster.Watermarks{}))
		synctest.Wait()
		p, _, _ = h.filter.last()
		if o := p.Owners(key, 1, nil); o[0] != x {
			t.Fatalf("key %x owned by %v after %s joined, want %s", key, o, x, x)
		}
		if _, ok := h.cl.Weights()["a"].Weights[key]; !ok {
			t.Fatal("a dropped a lost target before its new owner published it")
		}
		// Another old owner (terminating c) publishing it too is no reason
		// to drop it: c would drop it for the same reason, and it would
		// vanish from the placed set.
		h.cl.setPeer(cluster.Peer{Name: "c", State: cluster.Terminating})
		h.cl.setWeights("c", cluster.NodeWeights{Version: 1, Weights: map[uint64]float64{key: 100}})
		synctest.Wait()
		if _, ok := h.cl.Weights()["a"].Weights[key]; !ok {
			t.Fatal("a dropped a lost target because another old owner publishes it")
		}
		h.cl.setWeights(x, cluster.NodeWeights{Version: 1, Weights: map[uint64]float64{key: 100}})
		synctest.Wait()
		if _, ok := h.cl.Weights()["a"].Weights[key]; ok {
			t.Fatal("a still publishes a target its new owner publishes")
		}
	})
}

func TestUnknownPlacementModeRefused(t *testing.T) {
	_, err := New(Options{NodeName: "a", Placement: "hashmod"}, newFakeCluster("a"), &fakeFence{}, &fakeWAL{}, &fakeRemote{}, nil, nil)
	if err == nil {
		t.Fatal("an unknown --cluster.placement was accepted")
	}
}

// A sticky placement's generation is its result: a publication that moves
// no target (a weight that changes and leaves every owner where it is) is
// no new generation, so nothing is fenced or handed off; one that moves a
// target is.
func TestBoundedGenerationIsTheResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{Placement: ModeBounded, Tokens: 64})
		h.cl.becomeReady()
		h.cl.setPeer(participant("b", cluster.Watermarks{}))
		ws := map[uint64]float64{}
		r := rand.New(rand.NewPCG(11, 12))
		for range 40 {
			ws[r.Uint64()] = 10
		}
		h.cl.setWeights("b", cluster.NodeWeights{Incarnation: 1, Version: 1, Weights: maps.Clone(ws)})
		time.Sleep(inputsQuiet) // new weights are placed once settled
		synctest.Wait()
		first := placementOf(t, &boundedNode{name: "a", c: h.c})
		if !first.sticky {
			t.Fatal("peers of this version do not place from the current owners")
		}
		_, firstView := h.c.View()
		k := slices.Min(slices.Collect(maps.Keys(ws)))
		ws[k] = 10.001
		h.cl.setWeights("b", cluster.NodeWeights{Incarnation: 1, Version: 2, Weights: maps.Clone(ws)})
		time.Sleep(inputsQuiet) // new weights are placed once settled
		synctest.Wait()
		second := placementOf(t, &boundedNode{name: "a", c: h.c})
		if second == first {
			t.Fatal("a new publication was not placed")
		}
		for key := range ws {
			if o, was := second.Owners(key, 1, nil), first.Owners(key, 1, nil); !slices.Equal(o, was) {
				t.Fatalf("a weight change of 0.01%% moved %x from %v to %v", key, was, o)
			}
		}
		if RingID(second) != RingID(first) {
			t.Fatalf("a weight change that moves nothing is generation %x, was %x", RingID(second), RingID(first))
		}
		if _, v := h.c.View(); v != firstView {
			t.Fatalf("a placement that moves nothing is view %d, was %d: the filter would re-filter every target for nothing", v, firstView)
		}
		ws[k] = 1e6 // larger than the limit on b: it moves, or others do
		h.cl.setWeights("b", cluster.NodeWeights{Incarnation: 1, Version: 3, Weights: maps.Clone(ws)})
		time.Sleep(inputsQuiet) // new weights are placed once settled
		synctest.Wait()
		if third := placementOf(t, &boundedNode{name: "a", c: h.c}); RingID(third) == RingID(first) {
			t.Fatal("a weight change that moves targets kept the generation")
		}
	})
}

// After a view change the nodes that gained targets publish their weights
// and the ones that lost them stop, one publication after another: the
// sticky placement is built once they have settled, not once per
// publication, and a build that places every target as before is no new
// view for the filter. So are new weights, which every node publishes at
// the same time. A publication that does not follow this node's placement
// (its publisher placed differently) and a join are built at once.
func TestBoundedPublisherChangesAreBuiltOnceTheySettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{Placement: ModeBounded, Tokens: 64})
		h.cl.becomeReady()
		h.cl.setPeer(participant("b", cluster.Watermarks{}))
		h.cl.setPeer(participant("c", cluster.Watermarks{}))
		r := rand.New(rand.NewPCG(21, 22))
		sets := map[string]map[uint64]float64{"b": {}, "c": {}}
		for range 20 {
			sets["b"][r.Uint64()] = 10
			sets["c"][r.Uint64()] = 10
		}
		version := uint64(1)
		publish := func(name string) {
			version++
			h.cl.setWeights(name, cluster.NodeWeights{Incarnation: 1, Version: version, Weights: maps.Clone(sets[name])})
		}
		publish("b")
		publish("c")
		time.Sleep(inputsWait)
		synctest.Wait()
		builds := func() float64 { return testutil.ToFloat64(h.c.metrics.generations) }
		p := placementOf(t, &boundedNode{name: "a", c: h.c})
		_, view := h.c.View()
		n := builds()
		primary := func(k uint64) string { return p.Owners(k, 1, nil)[0] }
		settling := func(what string) {
			t.Helper()
			time.Sleep(inputsQuiet / 4)
			synctest.Wait()
			if builds() != n {
				t.Fatalf("built while the publications had not settled (%s)", what)
			}
		}

		// b and c follow the placement, one key at a time: first each
		// adopts what it is given, then each drops what it lost.
		all := slices.Concat(slices.Sorted(maps.Keys(sets["b"])), slices.Sorted(maps.Keys(sets["c"])))
		for _, name := range []string{"b", "c"} {
			for _, k := range all {
				if _, ok := sets[name][k]; !ok && primary(k) == name {
					sets[name][k] = 10
					publish(name)
					settling(name + " adopts")
				}
			}
		}
		for _, name := range []string{"b", "c"} {
			for _, k := range slices.Sorted(maps.Keys(sets[name])) {
				if primary(k) != name {
					delete(sets[name], k)
					publish(name)
					settling(name + " drops")
				}
			}
		}
		time.Sleep(inputsQuiet)
		synctest.Wait()
		if builds() != n+1 {
			t.Fatalf("built %v times once the publications settled, want 1", builds()-n)
		}
		if _, v := h.c.View(); v != view {
			t.Fatalf("the settled publications are view %d, was %d: placed from its own owners, a placement is the same", v, view)
		}

		// Publications that never settle are built by inputsWait.
		n = builds()
		for range 2 * int(inputsWait/(inputsQuiet/2)) {
			publish("b")
			time.Sleep(inputsQuiet / 2)
			synctest.Wait()
		}
		if got := builds() - n; got < 1 || got > 3 {
			t.Fatalf("built %v times in %v of publications, want one per %v", got, 2*inputsWait, inputsWait)
		}

		// b adopts a target placed on c: it placed differently.
		n = builds()
		for k := range sets["c"] {
			sets["b"][k] = 10
			break
		}
		publish("b")
		synctest.Wait()
		if builds() != n+1 {
			t.Fatalf("a publication against this node's placement was built %v times at once, want 1", builds()-n)
		}

		// Every node publishes its weights at the same multiple of the
		// period: they too are built once settled.
		n = builds()
		for _, name := range []string{"b", "c"} {
			for k := range sets[name] {
				sets[name][k] *= 1.5
			}
			publish(name)
			settling(name + " publishes new weights")
		}
		time.Sleep(inputsQuiet)
		synctest.Wait()
		if builds() != n+1 {
			t.Fatalf("new weights built %v times once settled, want 1", builds()-n)
		}

		// A participant that joins is built at once.
		n = builds()
		h.cl.setPeer(participant("d", cluster.Watermarks{}))
		synctest.Wait()
		if builds() != n+1 {
			t.Fatalf("a join was built %v times at once, want 1", builds()-n)
		}
	})
}

// A node running ModeBounded places with bounded loads only while every
// participant does: one that runs ring keeps the cluster on the ring (and
// this node publishes no weights meanwhile), and so does a node of an older
// version until it publishes weights, which it does only in ModeBounded.
func TestBoundedOnlyWhenEveryParticipantRunsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{Placement: ModeBounded, Tokens: 64})
		// b is there before a is ready: a alone would place (and publish)
		// with bounded loads.
		onRing := participant("b", cluster.Watermarks{})
		onRing.Capabilities = Capabilities(ModeRing)
		h.cl.setPeer(onRing)
		h.cl.becomeReady()
		synctest.Wait()
		isRing := func(want bool) {
			t.Helper()
			p, _, _ := h.filter.last()
			if _, ok := p.(*ring.Ring); ok != want {
				t.Fatalf("placement %T, want the plain ring: %v", p, want)
			}
			if mode, _, _ := h.c.Loads(); (mode == ModeRing) != want {
				t.Fatalf("Loads reports mode %s", mode)
			}
			if got := testutil.ToFloat64(h.c.metrics.ringFallback); got != b2f(want) {
				t.Fatalf("shoal_placement_ring_fallback %v", got)
			}
		}
		isRing(true)
		if _, ok := h.cl.Weights()["a"]; ok {
			t.Fatal("a published weights while the cluster places on the ring")
		}
		if !strings.Contains(h.log.String(), "Placing targets on the plain ring") || !strings.Contains(h.log.String(), "participants=[b]") {
			t.Fatalf("the fallback to the ring is not logged with who causes it:\n%s", h.log.String())
		}
		// b restarts running bounded.
		h.cl.setPeer(participant("b", cluster.Watermarks{}))
		synctest.Wait()
		isRing(false)
		if _, ok := h.cl.Weights()["a"]; !ok {
			t.Fatal("a publishes no weights once the cluster places with bounded loads")
		}
		// A node of an older version (no capabilities) joins: the ring
		// until it publishes weights, then bounded loads placed from
		// scratch, as it places them.
		h.cl.setPeer(cluster.Peer{Name: "c", State: cluster.Participant})
		synctest.Wait()
		isRing(true)
		h.cl.setWeights("c", cluster.NodeWeights{Incarnation: 1, Version: 1, Weights: map[uint64]float64{}})
		synctest.Wait()
		isRing(false)
		if b := placementOf(t, &boundedNode{name: "a", c: h.c}); b.sticky {
			t.Fatal("placed from the current owners with a participant of an older version")
		}
	})
}

// --cluster.placement's default is the plain ring (DefaultMode says why).
func TestDefaultModeIsRing(t *testing.T) {
	c, err := New(Options{NodeName: "a"}, newFakeCluster("a"), &fakeFence{}, &fakeWAL{}, &fakeRemote{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.opts.Placement != ModeRing || c.weigher != nil || Modes[0] != ModeRing {
		t.Fatalf("default mode %q (weigher %v), Modes %v", c.opts.Placement, c.weigher != nil, Modes)
	}
}
