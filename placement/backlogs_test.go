package placement

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
	"github.com/shoal-dev/shoal/scrape"
	"github.com/shoal-dev/shoal/wal"
)

// fakeBacklogs carries departed nodes' backlogs until delivered.
type fakeBacklogs struct {
	mu      sync.Mutex
	carried []Departed
	// elsewhere are departed nodes' backlogs other nodes carry; gone
	// are departed nodes with nothing pending; pinned are pending and
	// never delivered.
	elsewhere, gone, pinned []Departed
	// handedOverUntil ends HandedOverWait (zero: nothing to wait for).
	handedOverUntil time.Time
}

func (b *fakeBacklogs) Pending(node string, start time.Time, _ uint64, _ bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range slices.Concat(b.carried, b.elsewhere, b.pinned) {
		if d.Node == node && d.Start.Equal(start) {
			return true
		}
	}
	return false
}

func (b *fakeBacklogs) Lives() []Departed {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Concat(b.carried, b.elsewhere, b.gone, b.pinned)
}

func (b *fakeBacklogs) HandedOverWait() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(time.Until(b.handedOverUntil), 0)
}

func (b *fakeBacklogs) setHandedOverUntil(t time.Time) {
	b.mu.Lock()
	b.handedOverUntil = t
	b.mu.Unlock()
}

func (b *fakeBacklogs) Carried() []Departed {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Departed(nil), b.carried...)
}

func (b *fakeBacklogs) deliver() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.carried, b.elsewhere = nil, nil
}

// A gained target may start after its old owner has left: the gate waited
// on a peer that follows another placement, and meanwhile the old owner
// handed its backlog to another node. The hold waits for that backlog as
// for the peers alive when it is placed: sent before it, this node's
// samples would make the backlog's older ones out of order at the remote
// end. A departed node with nothing pending is not waited for.
func TestHoldWaitsForTheBacklogOfANodeGoneBeforeIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &fakeBacklogs{}
		h := start(t, Options{HandoffTimeout: time.Minute, Backlogs: b})
		r := ring.New([]string{"a", "c"}, 8)
		h.cl.setPeer(participant("c", cluster.Watermarks{FencedSeq: 2, LostSeq: 2, FencedRing: RingID(r), AckedSeq: 2, FencedPlacement: RingID(r)}))
		h.c.Fenced(r, 0, true)

		b.mu.Lock()
		b.elsewhere = []Departed{{Node: "gone", Start: time.Unix(100, 0), Seq: 4, Acked: 3}}
		// Lives of this node and of a live peer, pending for ever: a
		// hold must not count them as departed.
		b.pinned = []Departed{{Node: "a", Start: time.Unix(50, 0), Seq: 1}, {Node: "c", Start: time.Unix(50, 0), Seq: 1}}
		b.mu.Unlock()
		h.c.Activate(r, 0, []scrape.Unit{{Key: 9}})
		h.remote.ack(wal.Position{Segment: 1 << 30})
		heldUntilDelivered(t, h, b, "a departed node's backlog is still on its way")

		// Departed with nothing pending: no wait at all.
		b.mu.Lock()
		b.gone = []Departed{{Node: "gone", Start: time.Unix(100, 0), Seq: 4, Acked: 4}}
		b.mu.Unlock()
		h.c.Activate(r, 0, []scrape.Unit{{Key: 10}})
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold waits for a departed node with nothing pending")
		}
	})
}

// A node restarted while it carries a departed node's backlog may have
// written samples of that node's targets behind a hold of its previous
// life: its whole WAL stays held until the backlog is delivered.
func TestRestartedCarrierHoldsItsWALUntilTheBacklogIsDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &fakeBacklogs{carried: []Departed{{Node: "d", Start: time.Unix(100, 0), Seq: 7}}}
		h := start(t, Options{HandoffTimeout: time.Minute, Backlogs: b})
		h.remote.mu.Lock()
		var positions []wal.Position
		for _, p := range h.remote.holds {
			positions = append(positions, p)
		}
		h.remote.mu.Unlock()
		if len(positions) != 1 || positions[0] != (wal.Position{}) {
			t.Fatalf("holds at start %v, want one at the WAL's first position", positions)
		}
		heldUntilDelivered(t, h, b, "the backlog is still carried")
	})
}

// heldUntilDelivered checks, in a synctest bubble, that h's one hold
// stays while b's backlogs are pending (why) and goes once they are
// delivered.
func heldUntilDelivered(t *testing.T, h *harness, b *fakeBacklogs, why string) {
	t.Helper()
	time.Sleep(10 * time.Second)
	synctest.Wait()
	if h.remote.held() != 1 {
		t.Fatalf("hold released while %s", why)
	}
	b.deliver()
	time.Sleep(time.Second)
	synctest.Wait()
	if h.remote.held() != 0 {
		t.Fatal("hold kept after the backlog was delivered")
	}
}

func TestRestartedCarrierHoldEndsAtTheHandoffTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &fakeBacklogs{carried: []Departed{{Node: "d", Start: time.Unix(100, 0), Seq: 7}}}
		h := start(t, Options{HandoffTimeout: time.Minute, Backlogs: b})
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released before --cluster.handoff-timeout")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold kept past --cluster.handoff-timeout")
		}
	})
}

func TestNodeWithoutCarriedBacklogsStartsUnheld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{Backlogs: &fakeBacklogs{}})
		synctest.Wait()
		if n := h.remote.held(); n != 0 {
			t.Fatalf("%d holds at start without carried backlogs", n)
		}
	})
}

// A replica started on the storage of one that handed its backlog over
// (a StatefulSet pod) scrapes the same targets again: it stays a viewer,
// owning none, until the peer has delivered that backlog (it wakes on the
// peer's announcement, and asks again within handedOverPoll in case Backlogs
// had not seen it yet), or until the wait runs out (it wakes on time).
func TestReplicaStaysViewerUntilItsHandedOverBacklogIsDelivered(t *testing.T) {
	for _, end := range []string{"delivered, announced", "delivered, seen late", "wait ran out"} {
		t.Run(end, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &fakeBacklogs{handedOverUntil: time.Now().Add(time.Minute)}
				h := start(t, Options{Backlogs: b})
				h.cl.becomeReady()
				time.Sleep(30 * time.Second)
				synctest.Wait()
				if s := h.cl.Self().State; s != cluster.Viewer || !h.c.WaitsForHandedOver() {
					t.Fatalf("state %s (waits for it: %v) while the backlog handed over may be undelivered", s, h.c.WaitsForHandedOver())
				}
				switch end {
				case "delivered, announced":
					b.setHandedOverUntil(time.Time{})
					h.cl.notify() // the carrier withdraws its announcement
				case "delivered, seen late":
					b.setHandedOverUntil(time.Time{})
					time.Sleep(handedOverPoll)
				default:
					time.Sleep(30 * time.Second)
				}
				synctest.Wait()
				if s := h.cl.Self().State; s != cluster.Participant || h.c.WaitsForHandedOver() {
					t.Fatalf("state %s (waits for it: %v) once the wait is over (%s)", s, h.c.WaitsForHandedOver(), end)
				}
			})
		})
	}
}
