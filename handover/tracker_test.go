package handover

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/placement"
)

func TestTrackerKeepsLeaverPendingWhileItsBacklogIsCarried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.UnixMilli(1000)
		leaver := cluster.Peer{Name: "leaver", State: cluster.Terminating, StartTime: start, Handoff: cluster.Watermarks{FencedSeq: 2, AckedSeq: 1}}
		carrier := cluster.Peer{Name: "carrier", State: cluster.Participant, StartTime: start}
		cl := newFakeCluster("owner")
		cl.setPeers(leaver, carrier)
		// A wait longer than the whole test: the withdrawal at the end,
		// not the wait running out, must end the pending.
		tr := NewTracker(cl, time.Hour, 5*time.Minute)
		tr.refresh(true)
		if tr.Pending("leaver", start, 2, false) {
			t.Fatal("an alive leaver is the placement's to wait for, not the tracker's")
		}
		// The leaver is gone before the carrier's announcement arrives.
		cl.setPeers(carrier)
		tr.refresh(true)
		if !tr.Pending("leaver", start, 2, true) {
			t.Fatal("a leaver gone terminating with its fence unacknowledged is pending while an announcement may be on its way")
		}
		withCarry := carrier
		withCarry.Carried = []cluster.Carry{{Of: cluster.CarryKey("leaver", start), Seq: 2}}
		cl.setPeers(withCarry)
		time.Sleep(time.Minute)
		tr.refresh(true)
		if !tr.Pending("leaver", start, 2, true) {
			t.Fatal("an announced backlog is pending")
		}
		// The carrier crashes: still pending, until the TTL.
		cl.setPeers()
		time.Sleep(time.Minute)
		tr.refresh(true)
		if !tr.Pending("leaver", start, 2, true) {
			t.Fatal("a backlog whose carrier is down is pending")
		}
		// It comes back announcing it, then withdraws it once delivered.
		withCarry.StartTime = start.Add(time.Hour)
		cl.setPeers(withCarry)
		tr.refresh(true)
		if !tr.Pending("leaver", start, 2, true) {
			t.Fatal("a re-announced backlog is pending")
		}
		cl.setPeers(carrier)
		tr.refresh(true)
		if tr.Pending("leaver", start, 2, true) {
			t.Fatal("a delivered backlog is still pending")
		}
	})
}

func TestTrackerForgetsLeaverWithoutCarrierAfterTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.UnixMilli(1000)
		cl := newFakeCluster("owner")
		cl.setPeers(cluster.Peer{Name: "leaver", State: cluster.Terminating, StartTime: start, Handoff: cluster.Watermarks{FencedSeq: 2, AckedSeq: 1}})
		tr := NewTracker(cl, 10*time.Second, 5*time.Minute)
		tr.refresh(true)
		cl.setPeers()
		tr.refresh(true)
		if !tr.Pending("leaver", start, 2, true) {
			t.Fatal("pending right after it left")
		}
		time.Sleep(11 * time.Second)
		if tr.Pending("leaver", start, 2, true) {
			t.Fatal("still pending after the wait although nobody announced its backlog")
		}
		// A leaver that had its fence acknowledged is never waited for.
		if tr.Pending("leaver", start, 1, true) {
			t.Fatal("pending for an acknowledged fence")
		}
	})
}

// TestTrackerReadsALeaversLastStateFromItsDeparture: a leaver's last
// update (its fence acknowledged) and its leave may both be applied before
// the tracker wakes; the membership's record of the departure still
// carries that update, and a leaver with nothing unacknowledged is not
// waited for.
func TestTrackerReadsALeaversLastStateFromItsDeparture(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start, leaver, cl, tr := trackingALeaver()
		acked := leaver
		acked.Handoff.AckedSeq = 2
		cl.mu.Lock()
		cl.departed = []cluster.Departure{{Peer: acked, Left: time.Now()}}
		cl.mu.Unlock()
		cl.setPeers()
		tr.refresh(true)
		if tr.Pending("leaver", start, 2, true) {
			t.Fatal("pending for a leaver whose departure says its last fence was acknowledged")
		}
		// A departure that says otherwise keeps it pending (the backlog
		// may be on its way to a carrier).
		cl.mu.Lock()
		cl.departed = []cluster.Departure{{Peer: leaver, Left: time.Now()}}
		cl.mu.Unlock()
		tr2 := NewTracker(cl, time.Hour, 5*time.Minute)
		tr2.refresh(true)
		if !tr2.Pending("leaver", start, 2, true) {
			t.Fatal("not pending for a leaver that left with its last fence unacknowledged")
		}
	})
}

// TestTrackerPendingWhileItsViewDisagreesWithTheCaller: the tracker
// refreshes on its own goroutine, so the hold that asks may find a leaver
// gone while the tracker still sees it terminating, or already sees its
// next life. Either way the answer is pending until the views agree: a
// hold released in that instant lets the new owner's samples overtake the
// leaver's backlog, which the remote end then refuses as out of order.
func TestTrackerPendingWhileItsViewDisagreesWithTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start, leaver, cl, tr := trackingALeaver()
		// Gone for the caller; the tracker has not refreshed since (its
		// refresh gap has not passed: the clock stands still).
		cl.setPeers()
		if !tr.Pending("leaver", start, 2, true) {
			t.Fatal("not pending while the tracker still sees the leaver terminating")
		}
		// Back, restarted, in the tracker's view; the caller's is older.
		next := leaver
		next.State, next.StartTime, next.Handoff = cluster.Participant, start.Add(time.Minute), cluster.Watermarks{}
		cl.setPeers(next)
		tr.refresh(true)
		if !tr.Pending("leaver", start, 2, true) {
			t.Fatal("not pending while the tracker already sees the leaver's next life")
		}
		// Once the caller sees the next life too, its acknowledgements
		// are the caller's to wait for.
		if tr.Pending("leaver", start, 2, false) {
			t.Fatal("pending for a leaver alive again in both views")
		}
	})
}

// trackingALeaver is a tracker (wait 1h, TTL 5m) that has seen a leaver
// terminating with its fence 2 unacknowledged.
func trackingALeaver() (time.Time, cluster.Peer, *fakeCluster, *Tracker) {
	start := time.UnixMilli(1000)
	leaver := cluster.Peer{Name: "leaver", State: cluster.Terminating, StartTime: start, Handoff: cluster.Watermarks{FencedSeq: 2, AckedSeq: 1}}
	cl := newFakeCluster("owner")
	cl.setPeers(leaver)
	tr := NewTracker(cl, time.Hour, 5*time.Minute)
	tr.refresh(true)
	return start, leaver, cl, tr
}

// A hold waiting for one of a leaver's fences goes once the carrier
// announces that fence delivered, without waiting for the rest of the
// backlog: the rest may itself be behind a hold the leaver had, waiting for
// the very node that asks.
func TestTrackerReleasesAFenceTheCarrierDelivered(t *testing.T) {
	start := time.UnixMilli(1000)
	key := cluster.CarryKey("leaver", start)
	carrier := cluster.Peer{Name: "carrier", State: cluster.Participant, StartTime: start,
		Carried: []cluster.Carry{{Of: key, Seq: 5, Acked: 3}}}
	cl := newFakeCluster("owner")
	cl.setPeers(carrier)
	tr := NewTracker(cl, time.Hour, time.Hour)
	tr.refresh(true)
	for seq, pending := range map[uint64]bool{0: true, 3: false, 4: true, 5: true} {
		if got := tr.Pending("leaver", start, seq, true); got != pending {
			t.Errorf("fence %d of a backlog delivered through fence 3: pending = %v, want %v", seq, got, pending)
		}
	}
	tr.setLocal([]placement.Departed{{Node: "other", Start: start, Seq: 5, Acked: 2}})
	if tr.Pending("other", start, 2, true) || !tr.Pending("other", start, 3, true) {
		t.Error("a backlog this node carries is not judged by how far it is delivered")
	}
}

// Lives names the lives whose backlog some node holds: those a carrier
// announces (with the life and last fence they left with, so that a hold
// placed after the node left can still ask Pending about it) and those
// this node stores. A leaver whose backlog nobody announces, and a node
// with none, are left out; so is a node forgotten after the TTL.
func TestTrackerLivesNameBacklogsHeldElsewhereUntilTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.UnixMilli(1000)
		leaver := cluster.Peer{Name: "leaver", State: cluster.Terminating, StartTime: start, Handoff: cluster.Watermarks{FencedSeq: 4, LostSeq: 3, AckedSeq: 1}}
		unannounced := cluster.Peer{Name: "unannounced", State: cluster.Terminating, StartTime: start, Handoff: cluster.Watermarks{FencedSeq: 2, LostSeq: 2, AckedSeq: 1}}
		carrier := cluster.Peer{Name: "carrier", State: cluster.Participant, StartTime: start,
			Carried: []cluster.Carry{{Of: cluster.CarryKey("leaver", start), Seq: 4}}}
		cl := newFakeCluster("owner")
		cl.setPeers(leaver, unannounced, carrier)
		tr := NewTracker(cl, time.Hour, 5*time.Minute)
		tr.refresh(true) // it saw them alive
		cl.setPeers(carrier)
		local := placement.Departed{Node: "earlier", Start: time.UnixMilli(500), Seq: 9}
		tr.setLocal([]placement.Departed{local})

		lives := map[string]placement.Departed{}
		for _, d := range tr.Lives() {
			lives[d.Node] = d
		}
		want := placement.Departed{Node: "leaver", Start: start, Seq: 3, Acked: 1}
		if got := lives["leaver"]; got != want {
			t.Fatalf("the leaver's life: %+v, want %+v", got, want)
		}
		if got := lives["earlier"]; got != local {
			t.Fatalf("the stored backlog: %+v, want %+v", got, local)
		}
		if len(lives) != 2 {
			t.Fatalf("lives %+v: want only the announced and the stored backlog", lives)
		}
		time.Sleep(6 * time.Minute)
		carrier.Carried = nil // delivered meanwhile
		cl.setPeers(carrier)
		for _, d := range tr.Lives() {
			if d.Node == "leaver" {
				t.Fatal("a delivered backlog, or a node gone longer than the TTL, is still listed")
			}
		}
	})
}
