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

// The filter calls Activate before Fenced for the same re-filter
// (scrape.Filter.handoff). A node that learns of a ring change after its
// peers have already fenced that ring is released at its first re-filter:
// at Activate its own last fence is still of the old ring. The hold must
// then wait for the peers' fences of the new ring (already made), not for
// "their next fence", which no peer makes until the ring changes again.
func TestHoldForLateLearnerEndsWhenPeersAcked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Minute})
		r0 := ring.New([]string{"a", "b", "c"}, 8)
		r1 := ring.New([]string{"a", "b"}, 8) // c died
		h.c.Fenced(r0, 0, true)
		// b noticed first: it fenced r1 and its queues acknowledged that.
		h.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 5, FencedRing: RingID(r1), AckedSeq: 5}))
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
