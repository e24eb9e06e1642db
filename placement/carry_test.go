package placement

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
	"github.com/shoal-dev/shoal/wal"
)

// A node leaving behind a hold hands its backlog to a peer: the peer's
// queues for that backlog keep the hold until the peers the leaver waited
// for have acknowledged, and report how far the leaver's own fences are
// delivered.
func TestCarriedHoldsKeepTheLeaversWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		leaver := start(t, Options{HandoffTimeout: time.Minute})
		r := ring.New([]string{"a", "b"}, 8)
		id := RingID(r)
		leaver.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 5, LostSeq: 5, FencedRing: id, AckedSeq: 4}))
		gainUnder(t, leaver, r) // a hold for b's fence 5, and a's fence 1
		state, err := leaver.c.LeavingState()
		if err != nil {
			t.Fatal(err)
		}

		carrier := start(t, Options{HandoffTimeout: time.Minute})
		carrier.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 5, LostSeq: 5, FencedRing: id, AckedSeq: 4}))
		carrier.cl.becomeReady()
		q := &fakeRemote{}
		ch, err := carrier.c.CarryHolds(state, q)
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		if q.held() != 1 {
			t.Fatalf("the backlog's queues are behind %d holds, want the leaver's 1", q.held())
		}
		if n := ch.Step(); n != 1 || q.held() != 1 {
			t.Fatalf("hold released (%d left) while b's fence 5 is not acknowledged", n)
		}
		if ch.AckedSeq() != 0 {
			t.Fatalf("AckedSeq = %d before the backlog's queues acknowledged anything", ch.AckedSeq())
		}
		q.ack(wal.Position{Segment: 1 << 20})
		ch.Step()
		if ch.AckedSeq() != 1 {
			t.Fatalf("AckedSeq = %d once the backlog is acknowledged, want the leaver's fence 1", ch.AckedSeq())
		}
		carrier.cl.setPeer(participant("b", cluster.Watermarks{FencedSeq: 5, LostSeq: 5, FencedRing: id, AckedSeq: 5}))
		if n := ch.Step(); n != 0 || q.held() != 0 {
			t.Fatalf("%d holds left after b acknowledged its fence", n)
		}
	})
}

func TestCarriedHoldsOfAnUnreadableStateAreAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		carrier := start(t, Options{})
		q := &fakeRemote{}
		if _, err := carrier.c.CarryHolds([]byte("{"), q); err == nil {
			t.Fatal("no error for an unreadable hand-off state")
		}
		ch, err := carrier.c.CarryHolds(nil, q)
		if err != nil || ch.Step() != 0 || q.held() != 0 {
			t.Fatalf("an older leaver's backlog (no state) is held: %v, %d holds", err, q.held())
		}
	})
}
