package handover

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/placement"
)

// A replica started again on the storage of one that handed its backlog
// over (a StatefulSet pod) waits while the peer that took it announces it,
// and until it has seen that peer at all; once the peer is seen without
// it, the backlog is delivered and the record is done with.
func TestReplicaOnAHandedOverStorageWaitsForThePeersDelivery(t *testing.T) {
	rcvCl := newFakeCluster("peer")
	rcv := newTestService(t, rcvCl, Options{})
	var leaverCl *fakeCluster
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rcv.ServeHTTP(w, r)
		p := rcvCl.Self()
		p.Self, p.HTTPAddr = false, r.Host
		leaverCl.setPeers(p)
	})
	s, cl, _ := leaverWith(t, h, 10*time.Second)
	leaverCl = cl
	own := ownBacklog(t)
	s.Leave(context.Background(), own)

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
