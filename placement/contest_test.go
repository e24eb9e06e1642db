package placement

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/placement/gate"
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
		if contested(h.c, r, 0) {
			t.Fatal("contested by a viewer or a peer that announces no generation")
		}
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 4, LostSeq: 4, FencedRing: ViewID(r, 5), AckedSeq: 4, FencedPlacement: gen}))
		if contested(h.c, r, 0) {
			t.Fatal("contested by a peer on this placement under another configuration")
		}
		h.cl.setPeer(participant("b", wm(5, old)))
		if !contested(h.c, r, 0) {
			t.Fatal("not contested by a participant on another placement")
		}
		h.cl.setPeer(cluster.Peer{Name: "b", State: cluster.Terminating, Handoff: wm(5, old)})
		if !contested(h.c, r, 0) {
			t.Fatal("not contested by a terminating peer on another placement (its final fence is still to come)")
		}
		h.cl.setPeer(participant("b", wm(6, gen)))
		if contested(h.c, r, 0) {
			t.Fatal("still contested after the peer fenced this placement")
		}
		h.cl.setPeer(participant("b", wm(7, old)))
		if !contested(h.c, r, 0) {
			t.Fatal("not contested again")
		}
		h.cl.removePeer("b")
		if contested(h.c, r, 0) {
			t.Fatal("contested by a peer that left")
		}
		if v := testutil.ToFloat64(h.c.metrics.contested); v != 2 {
			t.Fatalf("shoal_handoff_contested_total = %v, want 2", v)
		}

		// A peer that never converges: the hand-off timeout ends the wait,
		// and Run wakes for it (the filter only asks again on Recheck).
		h.cl.setPeer(participant("b", wm(8, old)))
		if !contested(h.c, r, 0) {
			t.Fatal("not contested")
		}
		time.Sleep(time.Minute - time.Second)
		if !contested(h.c, r, 0) {
			t.Fatal("contest ended before the hand-off timeout")
		}
		time.Sleep(time.Second)
		if contested(h.c, r, 0) {
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
		if h.c.Released(r, 0) || !contested(h.c, r, 0) {
			t.Fatal("a terminating peer before its final fence is not waited for")
		}
		wm.Final = true
		h.cl.setPeer(cluster.Peer{Name: "b", State: cluster.Terminating, Handoff: wm})
		if !h.c.Released(r, 0) {
			t.Fatal("gained targets wait for a peer past its final fence to fence their view")
		}
		if contested(h.c, r, 0) {
			t.Fatal("a peer past its final fence counts as following another placement")
		}

		// The flag counts only from a terminating peer.
		h.cl.setPeer(participant("b", wm))
		if h.c.Released(r, 0) || !contested(h.c, r, 0) {
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
		if !contested(h.c, r, 0) {
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

// A contending peer holds back only the gained targets it may own under
// the generation it follows, when this node built that generation too, the
// peer places by the same scrape configuration and the target has waited
// the cluster's update bound since it was gained. A generation this node
// never built, another configuration, or a target the ring does not place
// hold them all, as no owner can be told.
func TestContestHoldsOnlyTheTargetsThePeerMayOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		const cfg = 0x1234567890
		h.c.Configured(cfg, 0)
		peer := func(name string, state cluster.State, gen uint64) cluster.Peer {
			p := participant(name, cluster.Watermarks{FencedSeq: 1, LostSeq: 1, FencedRing: gen, AckedSeq: 1, FencedPlacement: gen})
			p.State = state
			p.ScrapeConfig = cluster.ConfigIDs{Cur: shortID(cfg)}
			return p
		}
		for _, n := range []string{"b", "c", "d"} {
			h.cl.setPeer(peer(n, cluster.Participant, 0))
		}
		h.cl.becomeReady()
		synctest.Wait()
		old := h.c.Ring()
		// d leaves; b still follows the generation before, c has fenced
		// the new one.
		h.cl.setPeer(peer("d", cluster.Terminating, RingID(old)))
		synctest.Wait()
		r := h.c.Ring()
		if !slices.Equal(old.Nodes(), []string{"a", "b", "c", "d"}) || !slices.Equal(r.Nodes(), []string{"a", "b", "c"}) {
			t.Fatalf("rings %v then %v, want [a b c d] then [a b c]", old.Nodes(), r.Nodes())
		}
		h.cl.setPeer(peer("b", cluster.Participant, RingID(old)))
		h.cl.setPeer(peer("c", cluster.Participant, RingID(r)))
		synctest.Wait()

		cands := []gate.Candidate{{Key: keyMovedTo(t, old, r, "d", "a"), Known: true, Placed: true}}
		h.c.Fenced(r, cfg, true)
		gained := time.Now()
		h.c.Admit(gained, r, cfg, cands)
		time.Sleep(DefaultHandoffDelay)
		if a := h.c.Admit(time.Now(), r, cfg, cands); a.Start[0] {
			t.Fatal("a target of the leaver started before its final fence")
		}
		final := peer("d", cluster.Terminating, RingID(old))
		final.Handoff.Final = true
		h.cl.setPeer(final)
		synctest.Wait()
		// b's announcement is relied on only once the target has waited
		// the cluster's update bound since it was gained: before, it may
		// hide a newer one. The gate is told when to ask again.
		a := h.c.Admit(time.Now(), r, cfg, cands)
		if a.Start[0] {
			t.Fatal("b's announcement relied on before the update bound")
		}
		if want := gained.Add(fakeUpdateBound); !a.Next.Equal(want) {
			t.Fatalf("asked again at %v, want at the end of the update bound %v", a.Next, want)
		}
		time.Sleep(time.Until(a.Next))
		if a := h.c.Admit(time.Now(), r, cfg, cands); !a.Start[0] {
			t.Fatal("the leaver's target waits for b, which does not own it under the generation it follows")
		}

		// A target not placed by the ring (node-local, every node) can be
		// anyone's.
		v := &viewPeers{c: h.c, r: r, config: cfg, now: time.Now()}
		if unplaced := (gate.Candidate{Key: cands[0].Key, Known: true}); !first(v.Contested(unplaced, gained)) {
			t.Error("b does not hold back a gained target that is not placed by the ring")
		}

		for name, b := range map[string]cluster.Peer{
			"a generation this node never built": peer("b", cluster.Participant, 0xfeed),
			"another scrape configuration": func() cluster.Peer {
				p := peer("b", cluster.Participant, RingID(old))
				p.ScrapeConfig.Cur = shortID(cfg + 1)
				return p
			}(),
		} {
			h.cl.setPeer(b)
			v := &viewPeers{c: h.c, r: r, config: cfg, now: time.Now()}
			if contested, _ := v.Contested(cands[0], gained); !contested {
				t.Errorf("b on %s does not hold back every gained target", name)
			}
		}
	})
}

// keyMovedTo finds a key that from owns under before and to under after.
func keyMovedTo(t *testing.T, before, after scrape.Placement, from, to string) uint64 {
	t.Helper()
	for k := uint64(1); k < 1<<16; k++ {
		key := k * 0x9e3779b97f4a7c15
		if before.Owners(key, 1, nil)[0] == from && after.Owners(key, 1, nil)[0] == to {
			return key
		}
	}
	t.Fatalf("no key moved from %s to %s", from, to)
	return 0
}

// first is the first of two results.
func first[T, U any](t T, _ U) T { return t }

// contested reports whether any peer contests targets gained under r.
func contested(c *Coordinator, r scrape.Placement, config uint64) bool {
	return len(c.contenders(r, config)) > 0
}

// TestFenceAnnouncedBeforeJoiningReleasesNothing: a ring is named by its
// members' names, so after a restart the ring with the node's new life
// has the name the ring had before its old life left, and a peer's fence
// from before that leave reads as a fence of it. What a peer announced
// before this node turned participant neither releases the targets this
// node gains nor lets them start before the update bound; a fence it
// announces since does.
func TestFenceAnnouncedBeforeJoiningReleasesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Hour})
		r := ring.New([]string{"a", "b"}, 8)
		gen := RingID(r)
		wm := func(seq uint64) cluster.Watermarks {
			return cluster.Watermarks{FencedSeq: seq, LostSeq: seq, FencedRing: gen, AckedSeq: seq, FencedPlacement: gen}
		}
		h.cl.setPeer(participant("b", wm(3))) // b's word from before a's previous life left
		h.cl.becomeReady()
		synctest.Wait()
		if h.cl.Self().State != cluster.Participant {
			t.Fatalf("not promoted: %v", h.cl.Self().State)
		}
		if h.c.Released(r, 0) {
			t.Fatal("released by a fence announced before this node turned participant")
		}
		if !contested(h.c, r, 0) {
			t.Fatal("a peer whose last announcement predates this node's participation does not hold gained targets")
		}
		h.cl.setPeer(participant("b", wm(4)))
		if !h.c.Released(r, 0) {
			t.Fatal("not released by a fence announced since")
		}
		if contested(h.c, r, 0) {
			t.Fatal("contested by a peer that fenced this placement since")
		}
	})
}
