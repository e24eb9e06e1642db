package handover

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/placement"
)

// A replica started again on the storage of one that handed its backlog
// over (a StatefulSet pod) waits while the peer that took it announces it,
// and until it has seen that peer at all; once the peer is seen without
// it, the backlog is delivered and the record is done with.
func TestReplicaOnAHandedOverStorageWaitsForThePeersDelivery(t *testing.T) {
	s, _, _, rcvCl := leaverToPeer(t)
	own := ownBacklog(t)
	s.Leave(context.Background(), own)
	rec, ok, err := s.store.handedOver()
	if err != nil || !ok || rec.Peer != "peer" || rec.Seq != 0 {
		// own's last fence is not its final one: samples after it are
		// in the backlog, so only the whole delivery ends the wait.
		t.Fatalf("record %+v (%v, %v), want one naming peer without a fence", rec, ok, err)
	}

	again := newFakeCluster("leaver")
	s2, err := New(Options{Dir: s.opts.Dir}, again, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	tr := s2.Tracker()
	if tr.HandedOverWait() <= 0 {
		t.Fatal("no wait before the peer that took the backlog is seen")
	}
	carrier := rcvCl.Self()
	carrier.Self = false
	if len(carrier.Carried) != 1 {
		t.Fatalf("the receiver announces %+v, want the backlog", carrier.Carried)
	}
	again.setPeers(carrier)
	tr.refresh(true)
	if tr.HandedOverWait() <= 0 {
		t.Fatal("no wait while the peer announces the backlog")
	}
	carrier.Carried = nil
	again.setPeers(carrier)
	tr.refresh(true)
	if w := tr.HandedOverWait(); w != 0 {
		t.Fatalf("waits %v after the peer stopped announcing the backlog", w)
	}
	if _, ok, err := s2.store.handedOver(); ok || err != nil {
		t.Fatalf("record still there (%v) after delivery", err)
	}
	// A later life on this storage has nothing to wait for.
	s3, err := New(Options{Dir: s.opts.Dir}, newFakeCluster("leaver"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	if w := s3.Tracker().HandedOverWait(); w != 0 {
		t.Fatalf("the next life waits %v for a delivered backlog", w)
	}
}

// A carrier never seen (down, or this node cannot join) is waited for
// up to the leaver wait (the hand-off timeout), not for ever.
func TestHandedOverBacklogOfAnUnseenCarrierIsWaitedForUpToTheLeaverWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(newFakeCluster("leaver"), time.Minute, 0)
		var done []bool
		tr.setOwn(placement.Departed{Node: "leaver", Start: time.UnixMilli(1000), Seq: 2}, "peer", func(delivered bool) { done = append(done, delivered) })
		if w := tr.HandedOverWait(); w != time.Minute {
			t.Fatalf("waits %v at the first question, want the leaver wait", w)
		}
		time.Sleep(59 * time.Second)
		if w := tr.HandedOverWait(); w != time.Second {
			t.Fatalf("waits %v more 59 s in, want 1s", w)
		}
		time.Sleep(time.Second)
		if w := tr.HandedOverWait(); w != 0 {
			t.Fatalf("waits %v more past the leaver wait", w)
		}
		tr.HandedOverWait()
		if len(done) != 1 || done[0] {
			t.Fatalf("done %v, want once, undelivered", done)
		}
	})
}

// ownCarry follows a backlog of the life started at 1000 ms handed to
// "peer", up to fence seq, and returns the carry peers announce for it.
func ownCarry(t *testing.T, seq uint64) (*Tracker, *fakeCluster, cluster.Carry) {
	t.Helper()
	cl := newFakeCluster("leaver")
	tr := NewTracker(cl, 5*time.Minute, 0)
	start := time.UnixMilli(1000)
	tr.setOwn(placement.Departed{Node: "leaver", Start: start, Seq: seq}, "peer", nil)
	return tr, cl, cluster.Carry{Of: cluster.CarryKey("leaver", start), Seq: 2}
}

func carrier(name string, state cluster.State, cs ...cluster.Carry) cluster.Peer {
	return cluster.Peer{Name: name, State: state, StartTime: time.UnixMilli(7000), Carried: cs}
}

// A carrier that withdraws the backlog while terminating has passed it
// on: the wait goes on until the next carrier, once seen with it,
// withdraws it as a participant.
func TestHandedOverBacklogPassedOnIsWaitedForAtTheNextCarrier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, cl, c := ownCarry(t, 0)
		cl.setPeers(carrier("peer", cluster.Participant, c))
		tr.refresh(true)
		if tr.HandedOverWait() == 0 {
			t.Fatal("no wait while the carrier announces the backlog")
		}
		cl.setPeers(carrier("peer", cluster.Terminating), carrier("next", cluster.Participant))
		tr.refresh(true)
		if tr.HandedOverWait() == 0 {
			t.Fatal("no wait once the carrier passed it on while leaving, before the next announces it")
		}
		cl.setPeers(carrier("next", cluster.Participant, c))
		tr.refresh(true)
		time.Sleep(time.Minute)
		if tr.HandedOverWait() == 0 {
			t.Fatal("no wait while the next carrier announces the backlog")
		}
		cl.setPeers(carrier("next", cluster.Participant))
		tr.refresh(true)
		if w := tr.HandedOverWait(); w != 0 {
			t.Fatalf("waits %v once the next carrier withdrew it as a participant", w)
		}
	})
}

// A carrier first seen without the backlog, never having been seen with
// it, may be seen through metadata older than its announcement: the
// backlog counts as delivered only once that has lasted
// quietCarrierSettle.
func TestHandedOverBacklogOfAQuietCarrierIsDeliveredAfterTheSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, cl, _ := ownCarry(t, 0)
		cl.setPeers(carrier("peer", cluster.Participant))
		tr.refresh(true)
		if tr.HandedOverWait() == 0 {
			t.Fatal("no wait at the first sight of a carrier without the backlog")
		}
		time.Sleep(quietCarrierSettle - time.Second)
		if tr.HandedOverWait() == 0 {
			t.Fatal("no wait before the settle has passed")
		}
		time.Sleep(time.Second)
		if w := tr.HandedOverWait(); w != 0 {
			t.Fatalf("waits %v after the settle", w)
		}
	})
}

// The carrier's Acked ends the wait only for a backlog that ends at the
// leaver's final fence (HandedOver.Seq); otherwise its whole delivery
// does.
func TestHandedOverBacklogAckedThroughItsFinalFence(t *testing.T) {
	for _, seq := range []uint64{2, 0} {
		tr, cl, c := ownCarry(t, seq)
		c.Acked = 2
		cl.setPeers(carrier("peer", cluster.Participant, c))
		tr.refresh(true)
		if waits := tr.HandedOverWait() > 0; waits != (seq == 0) {
			t.Errorf("record seq %d, carry acked through 2: waits %v", seq, waits)
		}
	}
}
