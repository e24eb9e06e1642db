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

// Keys follow series, so a peer's scrape configuration does not matter to
// the hand-off: a peer that fenced the placement releases gained targets,
// and a hold waits only for its fence of it, whatever configuration either
// side runs (a rollout reaches replicas apart; waiting for it would cost
// every gained target the hand-off delay). The configuration each fence
// announces still tells which peers drift.
func TestHandoffIgnoresPeersConfigurationAndReportsDrift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const oldCfg, newCfg = 7, 8
		if ViewID(ring.New([]string{"a"}, 8), 0) != RingID(ring.New([]string{"a"}, 8)) {
			t.Fatal("ViewID without a configuration is not RingID (older peers' watermarks)")
		}
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "b"}, 8)
		b := func(seq, acked uint64, cfg uint64) cluster.Peer {
			return participant("b", cluster.Watermarks{FencedSeq: seq, FencedRing: ViewID(r, cfg), AckedSeq: acked, FencedPlacement: RingID(r)})
		}
		h.cl.setPeer(b(3, 3, oldCfg))
		if !h.c.Released(r, newCfg) {
			t.Fatal("not released by a peer that fenced the placement under another configuration")
		}
		if h.c.Contested(r, newCfg) {
			t.Fatal("contested by a peer on the same placement under another configuration")
		}
		if h.c.Released(ring.New([]string{"a", "b", "c"}, 8), newCfg) {
			t.Fatal("released under a placement b has not fenced")
		}

		h.c.Fenced(r, newCfg, true)
		h.c.Activate(r, newCfg, []scrape.Unit{{Key: 9}})
		h.remote.ack(wal.Position{Segment: 1 << 30})
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold waits for a peer's reload although it acknowledged its fence of the placement")
		}

		if d := h.c.ConfigDrift(); len(d) != 1 || d[0] != "b" {
			t.Fatalf("drift %v, want [b]", d)
		}
		if v := testutil.ToFloat64(h.c.metrics.driftPeers); v != 1 {
			t.Fatalf("shoal_cluster_config_drift_peers = %v, want 1", v)
		}
		h.cl.setPeer(b(4, 4, newCfg))
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if d := h.c.ConfigDrift(); len(d) != 0 {
			t.Fatalf("drift %v after b loaded the same configuration", d)
		}
		if v := testutil.ToFloat64(h.c.metrics.driftPeers); v != 0 {
			t.Fatalf("shoal_cluster_config_drift_peers = %v, want 0", v)
		}
		if v := testutil.ToFloat64(h.c.metrics.holdTimeouts); v != 0 {
			t.Fatalf("hold timeouts %v, want 0", v)
		}
	})
}

// A viewer, or a peer that announces no generation, tells nothing of its
// configuration and is not counted as drift.
func TestDriftSkipsPeersThatAnnounceNothing(t *testing.T) {
	r := ring.New([]string{"a", "b"}, 8)
	peers := []cluster.Peer{
		{Name: "a", Self: true, State: cluster.Participant},
		{Name: "v", State: cluster.Viewer, Handoff: cluster.Watermarks{FencedSeq: 1, FencedRing: ViewID(r, 9), FencedPlacement: RingID(r)}},
		{Name: "old", State: cluster.Participant, Handoff: cluster.Watermarks{FencedSeq: 1, FencedRing: RingID(r)}},
		{Name: "new", State: cluster.Participant},
		{Name: "same", State: cluster.Participant, Handoff: cluster.Watermarks{FencedSeq: 2, FencedRing: ViewID(r, 7), FencedPlacement: RingID(r)}},
		{Name: "other", State: cluster.Terminating, Handoff: cluster.Watermarks{FencedSeq: 2, FencedRing: ViewID(r, 9), FencedPlacement: RingID(r)}},
	}
	if d := drifted(peers, "a", 7); len(d) != 1 || d[0] != "other" {
		t.Fatalf("drifted %v, want [other]", d)
	}
}

// A peer of the previous version announces its fence of the plain ring: it
// counts, or a rolling upgrade would wait out every hand-off delay and hold
// remote write until that peer's next fence.
func TestReleasedAcceptsRingOnlyFenceOfOlderPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "b"}, 8)
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 3, FencedRing: RingID(r), AckedSeq: 3}))
		if !h.c.Released(r, 8) {
			t.Fatal("an older peer's fence of the ring does not release it")
		}
		h.c.Fenced(r, 8, true)
		h.c.Activate(r, 8, []scrape.Unit{{Key: 9}})
		h.remote.ack(wal.Position{Segment: 1 << 30})
		time.Sleep(time.Second)
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold waits for an older peer's next fence although it acknowledged its fence of the ring")
		}
	})
}
