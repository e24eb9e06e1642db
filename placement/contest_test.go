package placement

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
	"github.com/shoal-dev/shoal/scrape"
	"github.com/shoal-dev/shoal/wal"
)

// Gained targets wait past the hand-off delay only for peers that take
// part and announce a fence of another placement generation: under theirs
// they may own any target. Viewers, peers of an older version (no
// generation) and peers on the same placement under another configuration
// do not keep them; the hand-off timeout ends the wait.
func TestContestedByPeersOnAnotherPlacement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "b", "c"}, 8)
		other := ring.New([]string{"a", "b"}, 8)
		gen, old := RingID(r), RingID(other)
		wm := func(seq, gen uint64) cluster.Watermarks {
			return cluster.Watermarks{FencedSeq: seq, LostSeq: seq, FencedRing: gen, AckedSeq: seq, FencedPlacement: gen}
		}

		h.cl.setPeer(participant("b", wm(3, gen)))
		h.cl.setPeer(participant("c", cluster.Watermarks{FencedSeq: 2, LostSeq: 2, FencedRing: 77, AckedSeq: 2})) // older version
		h.cl.setPeer(cluster.Peer{Name: "v", State: cluster.Viewer, Handoff: wm(1, old)})
		if h.c.Contested(r, 0) {
			t.Fatal("contested by a viewer or a peer that announces no generation")
		}
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 4, LostSeq: 4, FencedRing: ViewID(r, 5), AckedSeq: 4, FencedPlacement: gen}))
		if h.c.Contested(r, 0) {
			t.Fatal("contested by a peer on this placement under another configuration")
		}
		h.cl.setPeer(participant("b", wm(5, old)))
		if !h.c.Contested(r, 0) {
			t.Fatal("not contested by a participant on another placement")
		}
		h.cl.setPeer(cluster.Peer{Name: "b", State: cluster.Terminating, Handoff: wm(5, old)})
		if !h.c.Contested(r, 0) {
			t.Fatal("not contested by a terminating peer on another placement (its final fence is still to come)")
		}
		h.cl.setPeer(participant("b", wm(6, gen)))
		if h.c.Contested(r, 0) {
			t.Fatal("still contested after the peer fenced this placement")
		}
		h.cl.setPeer(participant("b", wm(7, old)))
		if !h.c.Contested(r, 0) {
			t.Fatal("not contested again")
		}
		h.cl.removePeer("b")
		if h.c.Contested(r, 0) {
			t.Fatal("contested by a peer that left")
		}
		if v := testutil.ToFloat64(h.c.metrics.contested); v != 2 {
			t.Fatalf("shoal_handoff_contested_total = %v, want 2", v)
		}

		// A peer that never converges: the hand-off timeout ends the wait,
		// and Run wakes for it (the filter only asks again on Recheck).
		h.cl.setPeer(participant("b", wm(8, old)))
		if !h.c.Contested(r, 0) {
			t.Fatal("not contested")
		}
		time.Sleep(time.Minute - time.Second)
		if !h.c.Contested(r, 0) {
			t.Fatal("contest ended before the hand-off timeout")
		}
		time.Sleep(time.Second)
		if h.c.Contested(r, 0) {
			t.Fatal("contest not ended by the hand-off timeout")
		}
		if v := testutil.ToFloat64(h.c.metrics.contestTimeouts); v != 1 {
			t.Fatalf("shoal_handoff_contest_timeouts_total = %v, want 1", v)
		}
	})
}

// A terminating peer that has made its final fence scrapes nothing more
// and fences no later view (its filter is stopped while its queues
// flush): gained targets neither wait for it to fence their view nor
// count it as following another placement, and a hold waits only for its
// samples before that fence. Before it announces the final fence, it is
// waited for like any peer.
func TestATerminatedPeerPastItsFinalFenceHoldsNothingBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "c"}, 8)
		old := RingID(ring.New([]string{"a", "b", "c"}, 8))
		wm := cluster.Watermarks{FencedSeq: 5, LostSeq: 5, FencedRing: old, AckedSeq: 5, FencedPlacement: old}
		h.cl.setPeer(participant("c", cluster.Watermarks{FencedSeq: 2, LostSeq: 2, FencedRing: RingID(r), AckedSeq: 2, FencedPlacement: RingID(r)}))
		h.cl.setPeer(cluster.Peer{Name: "b", State: cluster.Terminating, Handoff: wm})
		if h.c.Released(r, 0) || !h.c.Contested(r, 0) {
			t.Fatal("a terminating peer before its final fence is not waited for")
		}
		wm.Final = true
		h.cl.setPeer(cluster.Peer{Name: "b", State: cluster.Terminating, Handoff: wm})
		if !h.c.Released(r, 0) {
			t.Fatal("gained targets wait for a peer past its final fence to fence their view")
		}
		if h.c.Contested(r, 0) {
			t.Fatal("a peer past its final fence counts as following another placement")
		}

		// The flag counts only from a terminating peer.
		h.cl.setPeer(participant("b", wm))
		if h.c.Released(r, 0) || !h.c.Contested(r, 0) {
			t.Fatal("a participant's final-fence flag was believed")
		}
		h.cl.setPeer(cluster.Peer{Name: "b", State: cluster.Terminating, Handoff: wm})

		// Its samples not yet acknowledged: a hold waits for them.
		unacked := wm
		unacked.AckedSeq = 4
		h.cl.setPeer(cluster.Peer{Name: "b", State: cluster.Terminating, Handoff: unacked})
		h.c.Fenced(r, 0, true)
		h.c.Activate(r, 0, []scrape.Unit{{Key: 8}})
		h.remote.ack(wal.Position{Segment: 1 << 30})
		time.Sleep(2 * DefaultHandoffDelay)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released before the peer past its final fence acknowledged its samples")
		}
		h.cl.setPeer(cluster.Peer{Name: "b", State: cluster.Terminating, Handoff: wm})
		synctest.Wait()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold kept after the peer acknowledged its final fence")
		}

		// Its samples are all acknowledged: the hold ends at once, not
		// after waiting the hand-off delay for a fence that never comes.
		h.c.Fenced(r, 0, true)
		h.c.Activate(r, 0, []scrape.Unit{{Key: 9}})
		h.remote.ack(wal.Position{Segment: 1 << 30})
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold waits for a later fence of a peer past its final fence")
		}
	})
}

// Run rechecks the filter when a contested wait times out: nothing else
// would make the filter ask again.
func TestContestTimeoutRechecksTheFilter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		rechecks := followView(t, h.c, nil)
		synctest.Wait()
		r := ring.New([]string{"a", "b"}, 8)
		other := ring.New([]string{"b"}, 8)
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 1, LostSeq: 1, FencedRing: RingID(other), FencedPlacement: RingID(other)}))
		synctest.Wait()
		if !h.c.Contested(r, 0) {
			t.Fatal("not contested")
		}
		synctest.Wait()
		before := rechecks()
		time.Sleep(time.Minute + time.Millisecond)
		synctest.Wait()
		if rechecks() == before {
			t.Fatal("no Recheck when the contested wait timed out")
		}
	})
}

// Two nodes that each started targets on the hand-off delay each hold their
// queues for the other's next fence. Each makes that fence, but its
// acknowledgement waits behind its own hold, so neither ever arrives: the
// holds used to wait for each other until --cluster.handoff-timeout, the
// receiver getting nothing from either. A hold waits for a fence made after
// it only for the hand-off delay.
func TestHoldsWaitingForEachOthersNextFenceEndAfterTheDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "b"}, 8)
		other := ring.New([]string{"b"}, 8)
		// b's last fence (acknowledged) is of another placement.
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 3, LostSeq: 3, FencedRing: RingID(other), AckedSeq: 3, FencedPlacement: RingID(other)}))
		h.c.Fenced(r, 0, true)
		h.c.Activate(r, 0, []scrape.Unit{{Key: 9}})
		// b fences r after a's hold, but b's own hold (for a's next fence)
		// keeps that fence from being acknowledged.
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 4, LostSeq: 4, FencedRing: RingID(r), AckedSeq: 3, FencedPlacement: RingID(r)}))
		h.remote.ack(wal.Position{Segment: 1 << 30})
		time.Sleep(DefaultHandoffDelay - 100*time.Millisecond)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released within the hand-off delay although b's next fence is not acknowledged")
		}
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold still waits for b's fence made after it, past the hand-off delay (until the hand-off timeout)")
		}
		if v := testutil.ToFloat64(h.c.metrics.holdTimeouts); v != 0 {
			t.Fatalf("hold timeouts %v, want 0", v)
		}
	})
}

// --cluster.handoff-delay has one meaning of zero, the default written
// once here: the filter's gate (Delay) and the hold's wait for a next fence
// use the same value, and a negative delay is refused, not read as "none".
func TestHandoffDelayZeroIsTheDefaultForGateAndHold(t *testing.T) {
	if _, err := New(Options{NodeName: "a", HandoffDelay: -time.Second}, newFakeCluster("a"), &fakeFence{}, &fakeWAL{}, &fakeRemote{}, nil, nil); err == nil {
		t.Fatal("a negative hand-off delay was accepted")
	}
	for _, tc := range []struct {
		opt, want time.Duration
	}{{0, DefaultHandoffDelay}, {500 * time.Millisecond, 500 * time.Millisecond}} {
		t.Run(tc.opt.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := start(t, Options{HandoffDelay: tc.opt, HandoffTimeout: time.Minute})
				if d := h.c.Delay(); d != tc.want {
					t.Fatalf("HandoffDelay %v: the filter's gate waits %v, want %v", tc.opt, d, tc.want)
				}
				r := ring.New([]string{"a", "b"}, 8)
				// b has not fenced r: the hold waits for its next fence, for
				// the delay only.
				h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 3, LostSeq: 3, FencedRing: 77, AckedSeq: 3}))
				h.c.Fenced(r, 0, true)
				h.c.Activate(r, 0, []scrape.Unit{{Key: 9}})
				h.remote.ack(wal.Position{Segment: 1 << 30})
				// Holds are checked every ackPoll.
				time.Sleep(tc.want - ackPoll - time.Millisecond)
				synctest.Wait()
				if h.remote.held() != 1 {
					t.Fatalf("HandoffDelay %v: hold for b's next fence released before %v", tc.opt, tc.want)
				}
				time.Sleep(2*ackPoll + 2*time.Millisecond)
				synctest.Wait()
				if h.remote.held() != 0 {
					t.Fatalf("HandoffDelay %v: hold for b's next fence kept past %v", tc.opt, tc.want)
				}
			})
		})
	}
}
