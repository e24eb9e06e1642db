package placement

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery/targetgroup"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
	"github.com/shoal-dev/shoal/scrape"
	"github.com/shoal-dev/shoal/wal"
)

// Several Coordinators with real ownership filters on one simulated
// cluster: metadata (states, watermarks) reaches every node at once, weight
// sets with a delay the test sets per receiver and publisher. That is what
// a missed weights send looks like (repaired by the next push/pull): nodes
// follow different placement generations for longer than the hand-off
// delay.

// mesh is the simulated cluster.
type mesh struct {
	mu    sync.Mutex
	nodes map[string]*meshNode
	// cut is when the weights sends of a publisher to a receiver
	// ([receiver, publisher]) get through again: until then they are
	// missed, and the newest is delivered then (the push/pull repair).
	cut map[[2]string]time.Time
}

type meshNode struct {
	m    *mesh
	name string
	// Under m.mu.
	self cluster.Peer
	seen map[string]cluster.NodeWeights // weight sets received, own included
	subs []chan struct{}
}

func (n *meshNode) Self() cluster.Peer {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	return n.self
}

func (n *meshNode) Peers() []cluster.Peer {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	var out []cluster.Peer
	for _, o := range n.m.nodes {
		p := o.self
		p.Self = o == n
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b cluster.Peer) int { return cmpString(a.Name, b.Name) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (n *meshNode) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.m.mu.Lock()
	n.subs = append(n.subs, ch)
	n.m.mu.Unlock()
	return ch, func() {}
}

// notifyAllLocked wakes every node's subscribers.
func (m *mesh) notifyAllLocked() {
	for _, o := range m.nodes {
		o.notifyLocked()
	}
}

func (n *meshNode) notifyLocked() {
	for _, ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (n *meshNode) SetState(s cluster.State) error {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	n.self.State = s
	n.m.notifyAllLocked()
	return nil
}

func (n *meshNode) SetWatermarks(w cluster.Watermarks) {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	if n.self.Handoff == w {
		return // like cluster.Node: only a change is announced
	}
	n.self.Handoff = w
	n.m.notifyAllLocked()
}

func (n *meshNode) SetScrapeConfig(ids cluster.ConfigIDs) {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	n.self.ScrapeConfig = ids
	n.m.notifyAllLocked()
}

func (n *meshNode) SetWeights(w map[uint64]float64) {
	m := n.m
	m.mu.Lock()
	defer m.mu.Unlock()
	set := cluster.NodeWeights{Incarnation: 1, Version: n.seen[n.name].Version + 1, Weights: maps.Clone(w)}
	n.seen[n.name] = set
	n.notifyLocked()
	for _, o := range m.nodes {
		if o == n {
			continue
		}
		deliver := func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if set.Version > o.seen[n.name].Version {
				o.seen[n.name] = set
				o.notifyLocked()
			}
		}
		if d := time.Until(m.cut[[2]string{o.name, n.name}]); d > 0 {
			time.AfterFunc(d, deliver)
			continue
		}
		if set.Version > o.seen[n.name].Version {
			o.seen[n.name] = set
			o.notifyLocked()
		}
	}
}

func (n *meshNode) Weights() map[string]cluster.NodeWeights {
	n.m.mu.Lock()
	defer n.m.mu.Unlock()
	return maps.Clone(n.seen)
}

func (n *meshNode) Ready() bool                     { return true }
func (n *meshNode) WaitReady(context.Context) error { return nil }
func (n *meshNode) UpdateBound() time.Duration      { return fakeUpdateBound }

// setFence is the fence as a set of fenced units.
type setFence struct {
	mu     sync.Mutex
	fenced map[scrape.Unit]bool
}

func (f *setFence) Fence(_ context.Context, units []scrape.Unit) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, u := range units {
		f.fenced[u] = true
	}
	return nil
}

func (f *setFence) Unfence(units []scrape.Unit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, u := range units {
		delete(f.fenced, u)
	}
}

// simNode is one node: Coordinator, filter, fence, and what its scrape
// manager was last given.
type simNode struct {
	name   string
	cl     *meshNode
	c      *Coordinator
	filter *scrape.Filter
	fence  *setFence
	remote *fakeRemote

	mu     sync.Mutex
	passed map[scrape.Unit]bool // targets last passed on to the scrape manager
}

// scraping lists the units this node appends samples of: passed on and
// not fenced.
func (n *simNode) scraping() []scrape.Unit {
	n.mu.Lock()
	passed := slices.Collect(maps.Keys(n.passed))
	n.mu.Unlock()
	n.fence.mu.Lock()
	defer n.fence.mu.Unlock()
	var out []scrape.Unit
	for _, u := range passed {
		if !n.fence.fenced[u] {
			out = append(out, u)
		}
	}
	return out
}

const simConfig = `
scrape_configs:
  - job_name: sim
`

// startSim starts one node per name with ModeBounded on a mesh; every
// node discovers the same targets.
func startSim(t *testing.T, names []string, targets int) ([]*simNode, *mesh) {
	t.Helper()
	cfg, err := config.Load(simConfig, promslog.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	m := &mesh{nodes: map[string]*meshNode{}, cut: map[[2]string]time.Time{}}
	for _, name := range names {
		m.nodes[name] = &meshNode{m: m, name: name, self: cluster.Peer{Name: name, State: cluster.Viewer}, seen: map[string]cluster.NodeWeights{}}
	}
	group := &targetgroup.Group{Source: "sim"}
	for i := range targets {
		group.Targets = append(group.Targets, model.LabelSet{model.AddressLabel: model.LabelValue(fmt.Sprintf("10.0.0.%d:9100", i))})
	}
	var nodes []*simNode
	for _, name := range names {
		n := &simNode{name: name, cl: m.nodes[name], fence: &setFence{fenced: map[scrape.Unit]bool{}}, remote: &fakeRemote{}, passed: map[scrape.Unit]bool{}}
		n.remote.ack(wal.Position{Segment: 1 << 40}) // the receiver acknowledges at once
		c, err := New(Options{NodeName: name, Tokens: 64, Placement: ModeBounded, HandoffTimeout: 5 * time.Minute}, n.cl, n.fence, &fakeWAL{}, n.remote, nil, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		n.c = c
		if n.filter, err = scrape.NewFilter(scrape.FilterOptions{Handoff: c}, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		n.filter.SetRing(ring.New(nil, 64), name, 1, false)
		if err := n.filter.ApplyConfig(cfg); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		in := make(chan map[string][]*targetgroup.Group, 1)
		out := make(chan map[string][]*targetgroup.Group)
		in <- map[string][]*targetgroup.Group{"sim": {group}}
		var wg sync.WaitGroup
		wg.Go(func() { _ = n.filter.Run(ctx, in, out) })
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case o := <-out:
					passed := map[scrape.Unit]bool{}
					for _, g := range o["sim"] {
						for _, tl := range g.Targets {
							u, err := scrape.ParseUnit(string(tl[scrape.UnitLabel]))
							if err != nil {
								t.Errorf("%s: target without a unit: %v", name, tl)
								continue
							}
							passed[u] = true
						}
					}
					n.mu.Lock()
					n.passed = passed
					n.mu.Unlock()
				}
			}
		})
		wg.Go(func() { c.Run(ctx) })
		t.Cleanup(func() {
			cancel()
			wg.Wait()
			c.Close()
		})
		nodes = append(nodes, n)
	}
	return nodes, m
}

// simTracker samples who scrapes what and remembers double scrapes and
// each target's longest stretch without a scraper.
type simTracker struct {
	nodes   []*simNode
	samples map[uint64]int // samples per scrape, by key
	last    map[uint64]time.Time
	gaps    map[uint64]time.Duration
	gapEnd  map[uint64]time.Time
	doubles []string
}

// step advances the bubble's clock by d in 100ms ticks; at each tick every
// node measures what it scrapes (once per second, as its scrapes would)
// and the tracker checks that no target has two scrapers.
func (s *simTracker) step(d time.Duration) {
	const tick = 100 * time.Millisecond
	for range int(d / tick) {
		time.Sleep(tick)
		synctest.Wait()
		now := time.Now()
		by := map[uint64][]string{}
		for _, n := range s.nodes {
			for _, u := range n.scraping() {
				by[u.Key] = append(by[u.Key], n.name)
				if now.UnixMilli()%1000 == 0 {
					n.c.Measured(u, s.samples[u.Key], time.Second)
				}
			}
		}
		for k := range s.samples {
			switch len(by[k]) {
			case 0:
				if g := now.Sub(s.last[k]); g > s.gaps[k] {
					s.gaps[k] = g
					s.gapEnd[k] = now
				}
			case 1:
				s.last[k] = now
			default:
				s.last[k] = now
				s.doubles = append(s.doubles, fmt.Sprintf("%x by %v at %s", k, by[k], now.Format("15:04:05.0")))
			}
		}
	}
}

// A weight change that reaches one node up to 25s later than the others
// (its sends were missed; a push/pull repairs it) makes that node follow
// another placement generation for that long. Targets moved by the new
// placement must not start on the hand-off delay while that node may
// still scrape them: no target is ever scraped by two nodes. They wait
// until it catches up, and start within a second of it: no target goes
// without a scraper longer than the disagreement plus that second. Holds
// end without the hand-off timeout.
func TestDivergingGenerationsNeitherScrapeTwiceNorStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		names := []string{"a", "b", "c"}
		nodes, m := startSim(t, names, 40)
		// Every node passes its first targets on within a second; learn
		// the keys from them.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		keys := map[uint64]bool{}
		for _, n := range nodes {
			for _, u := range n.scraping() {
				keys[u.Key] = true
			}
		}
		if len(keys) != 40 {
			t.Fatalf("%d targets scraped after start, want 40", len(keys))
		}
		s := &simTracker{nodes: nodes, samples: map[uint64]int{}, last: map[uint64]time.Time{}, gaps: map[uint64]time.Duration{}, gapEnd: map[uint64]time.Time{}}
		heavy := 0
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			s.samples[k] = 10
			if heavy < 3 {
				s.samples[k] = 300
				heavy++
			}
			s.last[k] = time.Now()
		}
		// The owners publish their weights and the placement settles.
		s.step(60 * time.Second)
		if len(s.doubles) > 0 {
			t.Fatalf("scraped twice while the first weights were published: %v", s.doubles)
		}
		gen := RingID(nodes[0].c.Placement())
		for _, n := range nodes[1:] {
			if RingID(n.c.Placement()) != gen {
				t.Fatalf("%s follows another placement than %s after a minute", n.name, nodes[0].name)
			}
		}
		for k := range s.gaps {
			s.gaps[k] = 0
		}

		// The owner of a heavy target: its weight triples, and what it
		// publishes in the next 25s reaches another node only then.
		const lag = 25 * time.Second
		var big uint64
		var publisher *simNode
		for _, n := range nodes {
			for _, u := range n.scraping() {
				if s.samples[u.Key] == 300 && publisher == nil {
					big, publisher = u.Key, n
				}
			}
		}
		receiver := nodes[0]
		if receiver == publisher {
			receiver = nodes[1]
		}
		m.mu.Lock()
		m.cut[[2]string{receiver.name, publisher.name}] = time.Now().Add(lag)
		m.mu.Unlock()
		s.samples[big] = 900
		generations := func() map[string]uint64 {
			out := map[string]uint64{}
			for _, n := range nodes {
				out[n.name] = RingID(n.c.Placement())
			}
			return out
		}
		// Until the new weight is published: one generation.
		var diverged time.Time
		for range 300 {
			s.step(100 * time.Millisecond)
			g := generations()
			if g[receiver.name] != g[publisher.name] {
				diverged = time.Now()
				break
			}
		}
		if diverged.IsZero() {
			t.Fatal("the tripled weight never changed the placement")
		}
		var agreed time.Time
		for range 2 * lag / (100 * time.Millisecond) {
			s.step(100 * time.Millisecond)
			g := generations()
			if g[receiver.name] == g[publisher.name] && agreed.IsZero() {
				agreed = time.Now()
			}
		}
		if agreed.IsZero() {
			t.Fatalf("generations still differ %v after the weight change: %v", 2*lag, generations())
		}
		if d := agreed.Sub(diverged); d < 3*DefaultHandoffDelay {
			t.Fatalf("the nodes disagreed only %v: not longer than the hand-off delay, nothing tested", d)
		}
		s.step(10 * time.Second)
		if g := generations(); g[receiver.name] != g[publisher.name] {
			t.Fatalf("generations differ again: %v", g)
		}

		for _, d := range s.doubles {
			t.Errorf("scraped twice: %s", d)
		}
		for k := range s.samples {
			if !s.last[k].Equal(time.Now()) {
				t.Errorf("target %x without a scraper 10s after the nodes agreed", k)
			}
		}
		disagreed := agreed.Sub(diverged)
		bound := disagreed + time.Second
		for k, gap := range s.gaps {
			if gap > bound {
				t.Errorf("target %x went %v without a scraper until %s; bound: the %v of disagreement and a second", k, gap, s.gapEnd[k].Format("15:04:05.0"), disagreed)
			}
		}
		for _, n := range nodes {
			if v := testutil.ToFloat64(n.c.metrics.holdTimeouts); v != 0 {
				t.Errorf("%s: %v hold timeouts", n.name, v)
			}
			if held := n.remote.held(); held != 0 {
				t.Errorf("%s: %d holds still on 10s after the nodes agreed", n.name, held)
			}
		}
		t.Logf("%s and %s disagreed from %s for %v; longest gap %v",
			receiver.name, publisher.name, diverged.Format("15:04:05.0"), disagreed, slices.Max(slices.Collect(maps.Values(s.gaps))))
	})
}
