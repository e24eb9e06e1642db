package placement

import (
	"context"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/cluster"
	shoaltest "github.com/shoal-dev/shoal/internal/testutil"
	"github.com/shoal-dev/shoal/placement/gate"
	"github.com/shoal-dev/shoal/ring"
	"github.com/shoal-dev/shoal/scrape"
	"github.com/shoal-dev/shoal/wal"
)

// fakeCluster is the membership as the Coordinator sees it. The real
// cluster is exercised by the cluster package's tests and e2e; here the
// timing of peers' watermarks must be under the test's control.
type fakeCluster struct {
	mu      sync.Mutex
	self    cluster.Peer
	peers   map[string]cluster.Peer
	weights map[string]cluster.NodeWeights // published sets, self's included
	ready   bool
	subs    []chan struct{}
	readyCh chan struct{}
}

func newFakeCluster(self string) *fakeCluster {
	return &fakeCluster{
		self:    cluster.Peer{Name: self, Self: true, State: cluster.Viewer, Capabilities: Capabilities(ModeBounded)},
		peers:   map[string]cluster.Peer{},
		weights: map[string]cluster.NodeWeights{},
		readyCh: make(chan struct{}),
	}
}

func (c *fakeCluster) Self() cluster.Peer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.self
}

func (c *fakeCluster) Peers() []cluster.Peer {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []cluster.Peer{c.self}
	for _, p := range c.peers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b cluster.Peer) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out
}

func (c *fakeCluster) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	c.subs = append(c.subs, ch)
	c.mu.Unlock()
	return ch, func() {}
}

func (c *fakeCluster) notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (c *fakeCluster) SetState(s cluster.State) error {
	c.mu.Lock()
	c.self.State = s
	c.mu.Unlock()
	c.notify()
	return nil
}

// SetWatermarks, like cluster.Node's, announces only a change.
func (c *fakeCluster) SetWatermarks(w cluster.Watermarks) {
	c.mu.Lock()
	if c.self.Handoff == w {
		c.mu.Unlock()
		return
	}
	c.self.Handoff = w
	c.mu.Unlock()
	c.notify()
}

func (c *fakeCluster) SetScrapeConfig(ids cluster.ConfigIDs) {
	c.mu.Lock()
	c.self.ScrapeConfig = ids
	c.mu.Unlock()
	c.notify()
}

func (c *fakeCluster) SetWeights(w map[uint64]float64) {
	c.mu.Lock()
	old := c.weights[c.self.Name]
	c.weights[c.self.Name] = cluster.NodeWeights{Incarnation: old.Incarnation, Version: old.Version + 1, Weights: maps.Clone(w)}
	c.mu.Unlock()
	c.notify()
}

func (c *fakeCluster) Weights() map[string]cluster.NodeWeights {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.weights)
}

// setWeights sets what peer name published, as gossip would deliver it.
func (c *fakeCluster) setWeights(name string, w cluster.NodeWeights) {
	c.mu.Lock()
	if w.Weights == nil {
		delete(c.weights, name)
	} else {
		c.weights[name] = w
	}
	c.mu.Unlock()
	c.notify()
}

func (c *fakeCluster) Ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ready
}

// UpdateBound is a bound of the defaults at a few members.
func (c *fakeCluster) UpdateBound() time.Duration { return fakeUpdateBound }

const fakeUpdateBound = 6 * time.Second

func (c *fakeCluster) WaitReady(ctx context.Context) error {
	select {
	case <-c.readyCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *fakeCluster) becomeReady() {
	c.mu.Lock()
	c.ready = true
	c.mu.Unlock()
	close(c.readyCh)
	c.notify()
}

func (c *fakeCluster) setPeer(p cluster.Peer) {
	c.mu.Lock()
	c.peers[p.Name] = p
	c.mu.Unlock()
	c.notify()
}

func (c *fakeCluster) removePeer(name string) {
	c.mu.Lock()
	delete(c.peers, name)
	c.mu.Unlock()
	c.notify()
}

// fakeFilter reads what the Coordinator gives the filter: its View.
type fakeFilter struct{ c *Coordinator }

// last is the view's placement and participation, and its generation
// (how many views were built).
func (f *fakeFilter) last() (scrape.Placement, bool, int) {
	v, gen := f.c.View()
	return v.Placement, v.Participant, int(gen)
}

// followView calls fn with every new view of c, as the filter reads them
// on Changes, until the test ends; rechecks counts the signals that carried
// no new view.
func followView(t *testing.T, c *Coordinator, fn func(scrape.View)) (rechecks func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu   sync.Mutex
		n    int
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		var seen uint64
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.Changes():
			}
			v, gen := c.View()
			if gen == seen || gen == 0 {
				mu.Lock()
				n++
				mu.Unlock()
				continue
			}
			seen = gen
			if fn != nil {
				fn(v)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

type fakeFence struct {
	mu       sync.Mutex
	fenced   []scrape.Unit
	unfenced []scrape.Unit
}

func (f *fakeFence) Fence(_ context.Context, units []scrape.Unit) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fenced = append(f.fenced, units...)
	return nil
}

func (f *fakeFence) Unfence(units []scrape.Unit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unfenced = append(f.unfenced, units...)
}

// fakeWAL grows by one segment per call, so every position is distinct.
type fakeWAL struct {
	mu  sync.Mutex
	end wal.Position
}

func (w *fakeWAL) EndPosition() (wal.Position, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.end.Segment++
	return w.end, nil
}

// fakeRemote acknowledges what the test says; holds are observable.
type fakeRemote struct {
	mu      sync.Mutex
	acked   wal.Position
	flushed []wal.Position
	holds   map[int]wal.Position
	next    int
}

func (r *fakeRemote) FlushNow(p wal.Position) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushed = append(r.flushed, p)
}

func (r *fakeRemote) Acked(p wal.Position) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.acked.Less(p)
}

func (r *fakeRemote) ack(p wal.Position) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acked = p
}

func (r *fakeRemote) Hold(p wal.Position) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holds == nil {
		r.holds = map[int]wal.Position{}
	}
	id := r.next
	r.next++
	r.holds[id] = p
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.holds, id)
	}
}

func (r *fakeRemote) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.holds)
}

type harness struct {
	c      *Coordinator
	cl     *fakeCluster
	filter *fakeFilter
	fence  *fakeFence
	wal    *fakeWAL
	remote *fakeRemote
	reg    *prometheus.Registry
	log    *shoaltest.LogBuffer
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, opts Options) *harness {
	t.Helper()
	return startOn(t, opts, &fakeWAL{})
}

// startOn starts node "a" on w: a restart goes on with the WAL of the life
// before.
func startOn(t *testing.T, opts Options, w *fakeWAL) *harness {
	t.Helper()
	h := &harness{
		cl: newFakeCluster("a"), fence: &fakeFence{},
		wal: w, remote: &fakeRemote{}, reg: prometheus.NewRegistry(),
		log: &shoaltest.LogBuffer{}, done: make(chan struct{}),
	}
	opts.NodeName = "a"
	c, err := New(opts, h.cl, h.fence, h.wal, h.remote, slog.New(slog.NewTextHandler(h.log, nil)), h.reg)
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	h.filter = &fakeFilter{c: c}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.done)
		c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-h.done
		c.Close()
	})
	return h
}

// participant is a participating peer of this version.
func participant(name string, wm cluster.Watermarks) cluster.Peer {
	return cluster.Peer{Name: name, State: cluster.Participant, Handoff: wm, Capabilities: Capabilities(ModeBounded)}
}

func TestPromotionAndRingRebuild(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{})
		h.cl.setPeer(participant("b", cluster.Watermarks{}))
		synctest.Wait()
		r, part, _ := h.filter.last()
		if part || !slices.Equal(r.Nodes(), []string{"b"}) {
			t.Fatalf("before ready: ring %v participant %v, want [b] and false (a viewer owns nothing)", r.Nodes(), part)
		}
		if h.cl.Self().State != cluster.Viewer {
			t.Fatal("promoted before the cluster was ready")
		}

		h.cl.becomeReady()
		synctest.Wait()
		if h.cl.Self().State != cluster.Participant {
			t.Fatalf("not promoted once ready: %v", h.cl.Self().State)
		}
		r, part, sets := h.filter.last()
		if !part || !slices.Equal(r.Nodes(), []string{"a", "b"}) {
			t.Fatalf("after promotion: ring %v participant %v", r.Nodes(), part)
		}
		if h.c.Ring() != r {
			t.Fatal("Ring() is not the ring handed to the filter")
		}

		// A watermark change alone does not rebuild the ring.
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 1, LostSeq: 1, FencedRing: 7}))
		synctest.Wait()
		if _, _, n := h.filter.last(); n != sets {
			t.Fatalf("ring rebuilt on a watermark change (%d → %d SetRing calls)", sets, n)
		}
		// A new participant does; a viewer is not on the ring.
		h.cl.setPeer(cluster.Peer{Name: "c", State: cluster.Viewer})
		h.cl.setPeer(participant("d", cluster.Watermarks{}))
		synctest.Wait()
		if r, _, _ := h.filter.last(); !slices.Equal(r.Nodes(), []string{"a", "b", "d"}) {
			t.Fatalf("ring %v, want [a b d]", r.Nodes())
		}
		h.cl.removePeer("d")
		synctest.Wait()
		if r, _, _ := h.filter.last(); !slices.Equal(r.Nodes(), []string{"a", "b"}) {
			t.Fatalf("ring %v after d left, want [a b]", r.Nodes())
		}
	})
}

func TestFencedPublishesAndAckedFollows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{})
		r := ring.New([]string{"a", "b"}, 8)
		units := []scrape.Unit{{Key: 1}}
		if err := h.c.Fence(context.Background(), units); err != nil {
			t.Fatal(err)
		}
		h.c.Fenced(r, 0, true)
		synctest.Wait()
		wm := h.cl.Self().Handoff
		if wm.FencedSeq != 1 || wm.FencedRing != RingID(r) || wm.AckedSeq != 0 {
			t.Fatalf("after the fence: %+v", wm)
		}
		if len(h.remote.flushed) != 1 {
			t.Fatalf("FlushNow called %d times, want 1", len(h.remote.flushed))
		}
		// Nothing new: no new fence number.
		h.c.Fenced(r, 0, true)
		if got := h.cl.Self().Handoff.FencedSeq; got != 1 {
			t.Fatalf("a re-filter without changes made fence %d", got)
		}
		h.remote.ack(h.remote.flushed[0])
		time.Sleep(time.Second) // the acknowledgement poll runs on the bubble's clock
		synctest.Wait()
		if got := h.cl.Self().Handoff.AckedSeq; got != 1 {
			t.Fatalf("acked seq %d after the queues acknowledged the fence, want 1", got)
		}
		if v := testutil.ToFloat64(h.c.metrics.ackedSeq); v != 1 {
			t.Fatalf("shoal_handoff_acked_sequence = %v", v)
		}
	})
}

// gainUnder makes the Coordinator this node's view: ring of a, b (and c),
// participant, and activates a gained unit.
func gainUnder(t *testing.T, h *harness, r *ring.Ring) {
	t.Helper()
	h.c.Fenced(r, 0, true)
	h.c.Activate(r, 0, []scrape.Unit{{Key: 9}})
	if len(h.fence.unfenced) != 1 {
		t.Fatal("Activate did not un-fence the unit")
	}
	if h.remote.held() != 1 {
		t.Fatalf("Activate put %d holds, want 1", h.remote.held())
	}
}

func TestReleasedWaitsForEveryLivePeerFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{})
		r := ring.New([]string{"a", "b", "c"}, 8)
		id := RingID(r)
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 3, LostSeq: 3, FencedRing: id}))
		h.cl.setPeer(cluster.Peer{Name: "c", State: cluster.Terminating, Handoff: cluster.Watermarks{FencedSeq: 2, LostSeq: 2, FencedRing: 99}})
		h.cl.setPeer(cluster.Peer{Name: "v", State: cluster.Viewer})
		if h.c.Released(r, 0) {
			t.Fatal("released while terminating c has not fenced the ring")
		}
		h.cl.setPeer(cluster.Peer{Name: "c", State: cluster.Terminating, Handoff: cluster.Watermarks{FencedSeq: 3, LostSeq: 3, FencedRing: id}})
		if h.c.Released(r, 0) {
			t.Fatal("released while viewer v, maybe a participant in its own view, announced nothing")
		}
		h.cl.setPeer(cluster.Peer{Name: "v", State: cluster.Viewer, Handoff: cluster.Watermarks{FencedSeq: 1, LostSeq: 1, FencedRing: id}})
		if !h.c.Released(r, 0) {
			t.Fatal("not released with every live peer fenced")
		}
		h.cl.setPeer(participant("c", cluster.Watermarks{FencedSeq: 4, LostSeq: 4, FencedRing: 5}))
		h.cl.removePeer("c") // dead or left: not waited for
		if !h.c.Released(r, 0) {
			t.Fatal("a gone peer is waited for")
		}
		// A viewer that announces fences may already be a participant in
		// its own view (promoted at the same moment): it is waited for.
		h.cl.setPeer(cluster.Peer{Name: "w", State: cluster.Viewer, Handoff: cluster.Watermarks{FencedSeq: 1, LostSeq: 1, FencedRing: 42}})
		if h.c.Released(r, 0) {
			t.Fatal("released while a viewer announcing another ring may be scraping")
		}
	})
}

// A target gained under a view starts only once this node has announced
// its own fence of that view, even when every peer has: the remote-write
// hold of the gain must come after the samples of what the node lost in
// the same change, which its peers may be holding for. The announcement
// signals the filter to ask again.
func TestGainedStartsOnlyAfterThisNodesFenceOfTheView(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{})
		before, r := ring.New([]string{"a", "b", "c"}, 8), ring.New([]string{"a", "b"}, 8)
		h.c.Fenced(before, 0, true)
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 3, LostSeq: 3, FencedRing: RingID(r)}))
		synctest.Wait()
		cands := []gate.Candidate{{Key: 1, Known: true}}
		if a := h.c.Admit(time.Now(), r, 0, cands); a.Start[0] {
			t.Fatal("started before this node fenced the view it was gained under")
		}
		for len(h.c.Changes()) > 0 {
			<-h.c.Changes()
		}
		h.c.Fenced(r, 0, true)
		select {
		case <-h.c.Changes():
		default:
			t.Fatal("the fence did not signal the filter to ask again")
		}
		if a := h.c.Admit(time.Now(), r, 0, cands); !a.Start[0] {
			t.Fatalf("not started after this node's fence with every peer fenced: %+v", a)
		}
	})
}

func TestHoldReleasedWhenPeerAcked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "b"}, 8)
		id := RingID(r)
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 5, LostSeq: 5, FencedRing: id, AckedSeq: 4}))
		gainUnder(t, h, r)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released while b's last fence is not acknowledged")
		}
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 5, LostSeq: 5, FencedRing: id, AckedSeq: 5}))
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold kept after b acknowledged its fence")
		}
		if n := testutil.CollectAndCount(h.c.metrics.holdSeconds); n != 1 {
			t.Fatalf("hold duration histogram has %d series", n)
		}
		if v := testutil.ToFloat64(h.c.metrics.holdTimeouts); v != 0 {
			t.Fatalf("hold timeouts %v, want 0", v)
		}
	})
}

// A hold waits for the fences made before it, not for later ones: a peer
// that fences again while this node holds (a second ring change during a
// remote-write outage) may itself be holding for this node, and waiting for
// its newest fence would make each wait for the other until the timeout.
func TestHoldWaitsOnlyForFencesBeforeIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "b"}, 8)
		id := RingID(r)
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 5, LostSeq: 5, FencedRing: id, AckedSeq: 4}))
		gainUnder(t, h, r)
		// b fences a newer ring whose samples its own hold keeps back.
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 6, LostSeq: 6, FencedRing: id + 1, AckedSeq: 4}))
		time.Sleep(time.Second)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released before b acknowledged the fence it was placed after")
		}
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 6, LostSeq: 6, FencedRing: id + 1, AckedSeq: 5}))
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold kept waiting for b's later fence")
		}
		if v := testutil.ToFloat64(h.c.metrics.holdTimeouts); v != 0 {
			t.Fatalf("hold timeouts %v, want 0", v)
		}
	})
}

// A fence that stopped no target hands nothing over: the node announces
// as LostSeq only the fences that did, which is what new owners wait for.
func TestLostSeqCountsOnlyFencesThatStoppedTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{})
		r1 := ring.New([]string{"a", "b"}, 8)
		r2 := ring.New([]string{"a", "b", "c"}, 8)
		if err := h.c.Fence(context.Background(), []scrape.Unit{{Key: 1}}); err != nil {
			t.Fatal(err)
		}
		h.c.Fenced(r1, 0, true)
		if wm := h.cl.Self().Handoff; wm.FencedSeq != 1 || wm.LostSeq != 1 {
			t.Fatalf("after a fence that stopped a target: %+v, want FencedSeq 1, LostSeq 1", wm)
		}
		h.c.Fenced(r2, 0, true) // a ring change that stopped nothing here
		if wm := h.cl.Self().Handoff; wm.FencedSeq != 2 || wm.LostSeq != 1 {
			t.Fatalf("after a fence that stopped nothing: %+v, want FencedSeq 2, LostSeq 1", wm)
		}
	})
}

// A hold waits for the peers that handed targets over, not for every peer:
// at 50 replicas a leave made every new owner wait for all 49 queues, the
// slowest one holding them all.
func TestHoldWaitsOnlyForPeersThatStoppedTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "b", "c"}, 8)
		id := RingID(r)
		// b fenced r without stopping anything since its acknowledged fence
		// 3; c stopped targets at its fence 5, not acknowledged yet.
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 5, LostSeq: 3, FencedRing: id, AckedSeq: 3}))
		h.cl.setPeer(participant("c", cluster.Watermarks{FencedSeq: 5, LostSeq: 5, FencedRing: id, AckedSeq: 4}))
		gainUnder(t, h, r)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released while c's fence that stopped targets is not acknowledged")
		}
		h.cl.setPeer(participant("c", cluster.Watermarks{FencedSeq: 5, LostSeq: 5, FencedRing: id, AckedSeq: 5}))
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold kept waiting for b, whose fences since its acknowledged one stopped nothing")
		}
	})
}

// A peer that had not fenced the hold's view is waited for (within the
// hand-off delay) until its next fence is acknowledged, or until that fence
// shows it stopped nothing.
func TestHoldForANextFenceEndsWhenItStoppedNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lost    uint64 // b's LostSeq after its next fence, 4
		release bool
	}{
		{"stopped nothing", 2, true},
		{"stopped targets", 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := start(t, Options{HandoffTimeout: time.Minute})
				r := ring.New([]string{"a", "b"}, 8)
				other := ring.New([]string{"b"}, 8)
				h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 3, LostSeq: 2, FencedRing: RingID(other), AckedSeq: 3, FencedPlacement: RingID(other)}))
				gainUnder(t, h, r)
				time.Sleep(time.Second)
				synctest.Wait()
				if h.remote.held() != 1 {
					t.Fatal("hold released before b made its next fence")
				}
				h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 4, LostSeq: tc.lost, FencedRing: RingID(r), AckedSeq: 3, FencedPlacement: RingID(r)}))
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				if released := h.remote.held() == 0; released != tc.release {
					t.Fatalf("hold released = %v after b's next fence (LostSeq %d, not acknowledged), want %v", released, tc.lost, tc.release)
				}
			})
		})
	}
}

// A peer released by the hand-off delay before it fenced this node's ring
// is waited for until its next fence is acknowledged (for at most the
// hand-off delay, TestHoldsWaitingForEachOthersNextFenceEndAfterTheDelay);
// one that restarted until its new life acknowledges a fence (its queue
// sends the old backlog first).
func TestHoldWaitsForLateAndRestartedPeers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "b"}, 8)
		id := RingID(r)
		born := time.Unix(100, 0)
		b := participant("b", cluster.Watermarks{FencedSeq: 3, LostSeq: 3, FencedRing: id + 7, AckedSeq: 3})
		b.StartTime = born
		h.cl.setPeer(b)
		gainUnder(t, h, r)
		time.Sleep(time.Second)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released although b has not fenced this ring yet")
		}
		// b restarts: a viewer replaying its WAL, nothing acknowledged yet.
		b = cluster.Peer{Name: "b", State: cluster.Viewer, StartTime: born.Add(time.Minute)}
		h.cl.setPeer(b)
		time.Sleep(time.Second)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released while the restarted b may still send its old backlog")
		}
		b.Handoff = cluster.Watermarks{FencedSeq: 1, LostSeq: 1, FencedRing: id, AckedSeq: 1}
		h.cl.setPeer(b)
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold kept after the restarted b acknowledged its first fence")
		}
	})
}

// The filter calls Activate before Fenced for the same re-filter
// (scrape.Filter.handoff). A node that learns of a ring change after its
// peers have already fenced that ring is released at its first re-filter:
// at Activate its own last fence is still of the old ring. The hold must
// then wait for the peers' fences of the new ring (already made), not for
// "their next fence", which no peer makes until the ring changes again.
func TestHoldOfLateLearnerEndsWhenPeersAlreadyAcked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		r0 := ring.New([]string{"a", "b", "c"}, 8)
		r1 := ring.New([]string{"a", "b"}, 8) // c died
		h.c.Fenced(r0, 0, true)
		// b noticed first: it fenced r1 and its queues acknowledged that.
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 5, LostSeq: 5, FencedRing: RingID(r1), AckedSeq: 5}))
		if !h.c.Released(r1, 0) {
			t.Fatal("not released although every live peer fenced r1")
		}
		// The filter's order.
		h.c.Activate(r1, 0, []scrape.Unit{{Key: 9}})
		h.c.Fenced(r1, 0, true)
		h.remote.ack(wal.Position{Segment: 1 << 30})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := h.remote.held(); n != 0 {
			t.Fatalf("hold still on 5s after b's fence of r1 was acknowledged (waits for b's fence 6, which b never makes; released only by --cluster.handoff-timeout)")
		}
	})
}

func TestHoldReleasedWhenPeerGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a"}, 8)
		h.cl.setPeer(cluster.Peer{Name: "b", State: cluster.Terminating, Handoff: cluster.Watermarks{FencedSeq: 2, LostSeq: 2, FencedRing: RingID(r), AckedSeq: 1}})
		gainUnder(t, h, r)
		time.Sleep(time.Second)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released while b is alive and behind")
		}
		h.cl.removePeer("b")
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold kept after b left")
		}
	})
}

func TestHoldReleasedByTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "b"}, 8)
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 5, LostSeq: 5, FencedRing: RingID(r), AckedSeq: 1}))
		gainUnder(t, h, r)
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released before the hand-off timeout")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold kept past the hand-off timeout")
		}
		if v := testutil.ToFloat64(h.c.metrics.holdTimeouts); v != 1 {
			t.Fatalf("shoal_handoff_hold_timeouts_total = %v, want 1", v)
		}
	})
}

// A hold keeps everything the node writes from the receiver, so one that
// lasts is logged, once, with the peers it waits for and where they stand.
func TestLongHoldIsLoggedWithThePeersItWaitsFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: 5 * time.Minute})
		r := ring.New([]string{"a", "b", "c"}, 8)
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 5, LostSeq: 5, FencedRing: RingID(r), AckedSeq: 4}))
		h.cl.setPeer(participant("c", cluster.Watermarks{FencedSeq: 3, LostSeq: 3, FencedRing: RingID(r), AckedSeq: 3}))
		gainUnder(t, h, r)
		time.Sleep(holdWarnAfter - time.Second)
		synctest.Wait()
		if strings.Contains(h.log.String(), "lasted long") {
			t.Fatalf("a hold logged as long before %v:\n%s", holdWarnAfter, h.log)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		warnings := strings.Count(h.log.String(), "lasted long")
		if warnings != 1 || !strings.Contains(h.log.String(), "waiting_for=[b]") || !strings.Contains(h.log.String(), "b:acked=4/5") {
			t.Fatalf("want one warning naming b (acked 4 of 5), got %d:\n%s", warnings, h.log)
		}
		if h.remote.held() != 1 {
			t.Fatal("the warning released the hold")
		}
	})
}

// A node whose terminate grace ran out flushes its queues afterwards; the
// leave must then announce what the flush delivered, although Run, which
// polls the acknowledgements, has stopped by then.
func TestFinalStateCarriesWhatTheFlushDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{TerminateGrace: 5 * time.Second})
		h.cl.setPeer(participant("b", cluster.Watermarks{}))
		h.cl.becomeReady()
		synctest.Wait()
		go h.c.Terminate()
		synctest.Wait()
		r, _, _ := h.filter.last()
		_ = h.c.Fence(context.Background(), []scrape.Unit{{Key: 3}})
		h.c.Fenced(r, 0, false)
		time.Sleep(6 * time.Second) // the grace runs out unacknowledged
		synctest.Wait()
		h.cancel()
		<-h.done
		h.remote.ack(wal.Position{Segment: 1 << 30}) // the flush
		wm := h.cl.Self().Handoff
		if wm.AckedSeq >= wm.FencedSeq {
			t.Fatalf("acknowledged %d of %d before the flush", wm.AckedSeq, wm.FencedSeq)
		}
		if n := h.c.PublishAcked(); n != 0 {
			t.Fatalf("%d holds in force, want none", n)
		}
		if wm := h.cl.Self().Handoff; wm.AckedSeq != wm.FencedSeq {
			t.Fatalf("final state: acknowledged %d of %d after the flush", wm.AckedSeq, wm.FencedSeq)
		}
	})
}

// A node leaving publishes its acknowledgement even when Run's last poll
// moved it and has not finished (it is writing the hand-off state): the
// final state must carry it, or the new owners wait for a backlog
// hand-over that never comes. Real time: a goroutine blocked on a mutex
// is not durably blocked in a synctest bubble.
func TestLeavingPublishesTheAcknowledgementRunMoved(t *testing.T) {
	h := start(t, Options{StatePath: filepath.Join(t.TempDir(), "handoff.json")})
	h.c.Fenced(ring.New([]string{"a", "b"}, 8), 0, true)
	h.c.saveMu.Lock() // Run's next save waits
	locked := true
	defer func() {
		if locked {
			h.c.saveMu.Unlock()
		}
	}()
	h.remote.ack(h.remote.flushed[0])
	shoaltest.EventuallyTrue(t, 10*time.Second, "Run moves the acknowledgement", func() bool {
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		return h.c.ackedSeq == 1
	})
	h.c.PublishAcked() // the leave
	if got := h.cl.Self().Handoff.AckedSeq; got != 1 {
		t.Fatalf("final state acknowledges fence %d, want 1", got)
	}
	h.c.saveMu.Unlock()
	locked = false
}

func TestTerminateWaitsForFinalFenceAcked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{TerminateGrace: 5 * time.Second})
		h.cl.setPeer(participant("b", cluster.Watermarks{}))
		h.cl.becomeReady()
		synctest.Wait()
		done := make(chan struct{})
		began := time.Now()
		go func() {
			defer close(done)
			h.c.Terminate()
		}()
		synctest.Wait()
		if h.cl.Self().State != cluster.Terminating {
			t.Fatal("Terminate did not announce the terminating state")
		}
		r, part, _ := h.filter.last()
		if part || slices.Contains(r.Nodes(), "a") {
			t.Fatalf("terminating node still owns targets: participant=%v ring=%v", part, r.Nodes())
		}
		if h.cl.Self().Handoff.Final {
			t.Fatal("final fence announced before the filter made it")
		}
		// The filter fences everything and reports it; peers learn that
		// this node scrapes nothing more.
		_ = h.c.Fence(context.Background(), []scrape.Unit{{Key: 3}})
		h.c.Fenced(r, 0, false)
		synctest.Wait()
		if wm := h.cl.Self().Handoff; !wm.Final || wm.FencedSeq == 0 {
			t.Fatalf("after the final fence, announced %+v, want Final", wm)
		}
		select {
		case <-done:
			t.Fatal("Terminate returned before the final fence was acknowledged")
		default:
		}
		h.remote.ack(wal.Position{Segment: 1 << 30})
		<-done
		if d := time.Since(began); d >= 5*time.Second {
			t.Fatalf("Terminate waited %v: the acknowledgement did not end it", d)
		}

		// Without acknowledgement, the grace bounds the wait.
		h2 := start(t, Options{TerminateGrace: 5 * time.Second})
		began = time.Now()
		h2.c.Terminate()
		if d := time.Since(began); d != 5*time.Second {
			t.Fatalf("Terminate without acknowledgement took %v, want the 5s grace", d)
		}
	})
}
