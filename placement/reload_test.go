package placement

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
	"github.com/shoal-dev/shoal/scrape"
	"github.com/shoal-dev/shoal/wal"
)

// A reload can move a target's key to another node without a ring change:
// a target gained under the new configuration is released only once every
// peer has fenced under it too (a peer still on the old configuration may
// be scraping it under its old key), and the hold waits for that fence.
func TestReleasedAndHoldFollowTheConfiguration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const oldCfg, newCfg = 7, 8
		if ViewID(ring.New([]string{"a"}, 8), 0) != RingID(ring.New([]string{"a"}, 8)) {
			t.Fatal("ViewID without a configuration is not RingID (older peers' watermarks)")
		}
		h := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "b"}, 8)
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 3, FencedRing: ViewID(r, oldCfg), AckedSeq: 3}))
		if !h.c.Released(r, oldCfg) {
			t.Fatal("not released under the configuration b fenced")
		}
		if h.c.Released(r, newCfg) {
			t.Fatal("released under a configuration b has not applied")
		}
		if ViewID(r, oldCfg) == ViewID(r, newCfg) || ViewID(r, newCfg) == RingID(r) {
			t.Fatal("views of one ring under different configurations are equal")
		}

		// Started by the hand-off delay: the hold waits for b's next fence.
		h.c.Fenced(r, newCfg, true)
		h.c.Activate(r, newCfg, []scrape.Unit{{Key: 9}})
		h.remote.ack(wal.Position{Segment: 1 << 30})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released before b fenced under the new configuration")
		}
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 4, FencedRing: ViewID(r, newCfg), AckedSeq: 4}))
		time.Sleep(time.Second)
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold still on after b fenced under the new configuration and acknowledged it")
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
