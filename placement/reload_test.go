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

// A reload can move a target's key to another node without a ring change:
// a target gained under the new configuration is released only once every
// peer has fenced under it too (a peer still on the old configuration may
// be scraping it under its old key). The hold waits for that peer's next
// fence only for the hand-off delay: a fence made after the hold is a wait
// forward in time (two nodes could each wait for the other's), and a peer
// that reloads later than that has scraped the target alongside this node
// anyway. After the delay only the fences made before the hold count.
func TestReleasedAndHoldFollowTheConfiguration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const oldCfg, newCfg = 7, 8
		if ViewID(ring.New([]string{"a"}, 8), 0) != RingID(ring.New([]string{"a"}, 8)) {
			t.Fatal("ViewID without a configuration is not RingID (older peers' watermarks)")
		}
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "b"}, 8)
		b := func(seq, acked uint64, cfg uint64) cluster.Peer {
			return participant("b", cluster.Watermarks{FencedSeq: seq, LostSeq: seq, FencedRing: ViewID(r, cfg), AckedSeq: acked, FencedPlacement: RingID(r)})
		}
		h.cl.setPeer(b(3, 3, oldCfg))
		if !h.c.Released(r, oldCfg) {
			t.Fatal("not released under the configuration b fenced")
		}
		if h.c.Released(r, newCfg) {
			t.Fatal("released under a configuration b has not applied")
		}
		if contested(h.c, r, newCfg) {
			t.Fatal("contested by a peer on the same placement under another configuration: its reload would keep gained targets back past the delay")
		}
		if ViewID(r, oldCfg) == ViewID(r, newCfg) || ViewID(r, newCfg) == RingID(r) {
			t.Fatal("views of one ring under different configurations are equal")
		}

		// Started by the hand-off delay: within the delay the hold waits
		// for b's next fence; b makes it and acknowledges it.
		h.c.Fenced(r, newCfg, true)
		h.c.Activate(r, newCfg, []scrape.Unit{{Key: 9}})
		h.remote.ack(wal.Position{Segment: 1 << 30})
		time.Sleep(time.Second)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released within the hand-off delay before b fenced under the new configuration")
		}
		h.cl.setPeer(b(4, 3, newCfg))
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released before b acknowledged its fence under the new configuration")
		}
		h.cl.setPeer(b(4, 4, newCfg))
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold still on after b fenced under the new configuration and acknowledged it")
		}

		// b reloads later than the delay: the hold ends at the delay, on
		// b's fence made before it.
		h.c.Fenced(r, oldCfg, true)
		h.c.Activate(r, oldCfg, []scrape.Unit{{Key: 10}})
		h.remote.ack(wal.Position{Segment: 1 << 31})
		began := time.Now()
		time.Sleep(DefaultHandoffDelay - 100*time.Millisecond)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released within the hand-off delay before b fenced under the configuration")
		}
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatalf("hold still on %v after it was placed: it waits for b's next fence past the hand-off delay", time.Since(began))
		}
		if v := testutil.ToFloat64(h.c.metrics.holdTimeouts); v != 0 {
			t.Fatalf("hold timeouts %v, want 0", v)
		}
	})
}

// A peer of the previous version announces its fence of the plain ring: it
// counts, or a rolling upgrade would wait out every hand-off delay and hold
// remote write until that peer's next fence.
func TestReleasedAcceptsRingOnlyFenceOfOlderPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "b"}, 8)
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 3, LostSeq: 3, FencedRing: RingID(r), AckedSeq: 3}))
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
