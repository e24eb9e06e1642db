package placement

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
	"github.com/shoal-dev/shoal/scrape"
)

// Two nodes promoted at nearly the same time: each still sees the other as
// the viewer that joined (no watermarks yet, its first fence still in
// gossip). Neither may start the whole key space alone, or both append the
// same targets until the views converge.
func TestReleasedWaitsForViewerWithoutFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{})
		h.cl.setPeer(cluster.Peer{Name: "b", State: cluster.Viewer})
		alone := ring.New([]string{"a"}, 8)
		if h.c.Released(alone, 0) {
			t.Fatal("released a ring of one while a live viewer (maybe already a participant in its own view) has announced nothing")
		}
	})
}

// fencingFilter fences and announces every view it is given, as the real
// filter does after each re-filter.
type fencingFilter struct {
	c    *Coordinator
	mu   sync.Mutex
	ring scrape.Placement
}

func (f *fencingFilter) follow(v scrape.View) {
	f.mu.Lock()
	f.ring = v.Placement
	f.mu.Unlock()
	f.c.Fenced(v.Placement, 0, v.Participant)
}

func (f *fencingFilter) last() scrape.Placement {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ring
}

// Liveness of the start-up wait: two nodes promoted at the same moment each
// wait for the other, and neither waits for anything before fencing, so
// once gossip carries their states across both are released at once, well
// before the hand-off delay.
func TestSimultaneousPromotersReleaseEachOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		names := []string{"a", "b"}
		cls := map[string]*fakeCluster{}
		filters := map[string]*fencingFilter{}
		coords := map[string]*Coordinator{}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		t.Cleanup(func() { cancel(); wg.Wait() })
		for _, n := range names {
			cl := newFakeCluster(n)
			c, err := New(Options{NodeName: n}, cl, &fakeFence{}, &fakeWAL{}, &fakeRemote{}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			cls[n], coords[n], filters[n] = cl, c, &fencingFilter{c: c}
			followView(t, c, filters[n].follow)
		}
		// gossip delivers each node's current state and watermarks to the other.
		gossip := func() {
			for _, from := range names {
				for _, to := range names {
					if from != to {
						p := cls[from].Self()
						p.Self = false
						cls[to].setPeer(p)
					}
				}
			}
			synctest.Wait()
		}
		for _, n := range names {
			wg.Go(func() { coords[n].Run(ctx) })
		}
		gossip() // both viewers, in each other's view too
		for _, n := range names {
			cls[n].becomeReady()
		}
		synctest.Wait()
		for _, n := range names {
			if cls[n].Self().State != cluster.Participant {
				t.Fatalf("%s not promoted", n)
			}
			if r := filters[n].last(); r.Len() != 1 || coords[n].Released(r, 0) {
				t.Fatalf("%s released its ring of one while the other, promoted too, has not fenced it", n)
			}
		}
		start := time.Now()
		gossip() // each sees the other as a participant: ring of two, fenced
		gossip() // and the fences
		for _, n := range names {
			r := filters[n].last()
			if r.Len() != 2 {
				t.Fatalf("%s: ring %v after gossip, want both", n, r.Nodes())
			}
			if !coords[n].Released(r, 0) {
				t.Fatalf("%s not released once both fenced the ring of two: the promoters wait for each other", n)
			}
		}
		if d := time.Since(start); d >= DefaultHandoffDelay {
			t.Fatalf("released after %v, not before the hand-off delay", d)
		}
	})
}
