package handover

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/placement"
	"github.com/shoal-dev/shoal/wal"
)

// leaverWith returns a leaving Service whose only peer is served by h.
func leaverWith(t *testing.T, h http.Handler, timeout time.Duration) (*Service, *fakeCluster, *prometheus.Registry) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cl := newFakeCluster("leaver")
	cl.setPeers(cluster.Peer{Name: "peer", State: cluster.Participant, HTTPAddr: strings.TrimPrefix(srv.URL, "http://")})
	reg := prometheus.NewRegistry()
	s, err := New(Options{Dir: filepath.Join(t.TempDir(), "handover"), Timeout: timeout}, cl, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, cl, reg
}

func ownBacklog(t *testing.T) *Own {
	root := t.TempDir()
	writeBacklog(t, root, 1000)
	end, err := wal.LastRecordEnd(filepath.Join(root, "wal"))
	if err != nil {
		t.Fatal(err)
	}
	return &Own{Dir: root, Node: "leaver", Start: time.UnixMilli(1000), Seq: 2, Queues: []string{"rcv"}, End: end}
}

func progressOf(t *testing.T, own *Own) string {
	b, err := os.ReadFile(filepath.Join(own.Dir, "remotewrite", "rcv.json"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLeaveHandsOverAndMarksOwnProgressSent(t *testing.T) {
	rcvCl := newFakeCluster("peer")
	rcv := newTestService(t, rcvCl, Options{})
	var leaverCl *fakeCluster
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rcv.ServeHTTP(w, r)
		// What the leaver would see through gossip.
		p := rcvCl.Self()
		p.Self, p.HTTPAddr = false, r.Host
		leaverCl.setPeers(p)
	})
	s, cl, reg := leaverWith(t, h, 10*time.Second)
	leaverCl = cl
	own := ownBacklog(t)
	s.Leave(context.Background(), own)
	if pend, _ := rcv.store.Pending(); len(pend) != 1 || pend[0].End != own.End {
		t.Fatalf("receiver holds %+v, want the backlog up to %v", pend, own.End)
	}
	if got := testutil.ToFloat64(s.metrics.transfers.WithLabelValues("sent")); got != 1 {
		t.Errorf("transfers sent %v, want 1", got)
	}
	if p := progressOf(t, own); !strings.Contains(p, `"offset": `) || strings.Contains(p, `"offset": 0,`) {
		t.Errorf("own progress not marked sent: %s", p)
	}
	_ = reg
}

func TestLeaveThatCannotCompleteLeavesBacklogAndCountsWhy(t *testing.T) {
	for _, c := range []struct {
		name, reason string
		h            http.Handler
		timeout      time.Duration
	}{
		{"refused", ReasonRefused, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "no", http.StatusServiceUnavailable)
		}), 10 * time.Second},
		{"deadline", ReasonDeadline, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Reads the whole transfer and never answers: the server notices
			// the client giving up only once the body is consumed.
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}), 300 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _, _ := leaverWith(t, c.h, c.timeout)
			own := ownBacklog(t)
			before := progressOf(t, own)
			s.Leave(context.Background(), own)
			if got := testutil.ToFloat64(s.metrics.failures.WithLabelValues("sent", c.reason)); got != 1 {
				t.Errorf("failures{reason=%q} = %v, want 1", c.reason, got)
			}
			if after := progressOf(t, own); after != before {
				t.Errorf("progress changed by a failed hand-over:\n%s\n%s", before, after)
			}
		})
	}
	t.Run("no peer", func(t *testing.T) {
		s := newTestService(t, newFakeCluster("leaver"), Options{})
		own := ownBacklog(t)
		before := progressOf(t, own)
		s.Leave(context.Background(), own)
		if got := testutil.ToFloat64(s.metrics.failures.WithLabelValues("sent", ReasonNoPeer)); got != 1 {
			t.Errorf("failures{reason=no_peer} = %v, want 1", got)
		}
		if progressOf(t, own) != before {
			t.Error("progress changed by a failed hand-over")
		}
	})
}

// A replica started again on the storage of one that handed its backlog
// over (a StatefulSet pod) scrapes the same targets again: its queues wait
// until the peer that took the backlog has delivered it, or its newer
// samples would make the backlog's older ones out of order at the remote
// end. It waits while the peer announces the backlog, and until it has
// seen the peer at all; once the peer is seen without it, the record is
// done with.
func TestRestartAfterHandOverWaitsForThePeersDelivery(t *testing.T) {
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
	want := placement.Departed{Node: "leaver", Start: own.Start, Seq: own.Seq}
	if got := tr.Carried(); len(got) != 1 || got[0] != want {
		t.Fatalf("carried at start %+v, want the backlog handed over %+v", got, want)
	}
	if !tr.Pending("leaver", own.Start, own.Seq, false) {
		t.Fatal("not pending before the peer that took it is seen")
	}
	carrier := rcvCl.Self()
	carrier.Self = false
	if len(carrier.Carried) != 1 {
		t.Fatalf("the receiver announces %+v, want the backlog", carrier.Carried)
	}
	again.setPeers(carrier)
	tr.refresh(true)
	if !tr.Pending("leaver", own.Start, own.Seq, false) {
		t.Fatal("not pending while the peer announces it")
	}
	carrier.Carried = nil
	again.setPeers(carrier)
	tr.refresh(true)
	if tr.Pending("leaver", own.Start, own.Seq, false) {
		t.Fatal("pending after the peer stopped announcing it")
	}
	if len(tr.Carried()) != 0 {
		t.Fatalf("carried after delivery: %+v", tr.Carried())
	}
	if _, ok, err := s2.store.handedOver(); ok || err != nil {
		t.Fatalf("record still there (%v) after delivery", err)
	}
}

// A carrier never seen (down, or this node cannot join) is waited for
// as long as a leaver gone with its backlog unannounced, not for ever.
func TestHandedOverBacklogOfAnUnseenCarrierIsWaitedForUpToTheLeaverWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(newFakeCluster("leaver"), time.Minute, 0)
		start := time.UnixMilli(1000)
		done := 0
		tr.setOwn(placement.Departed{Node: "leaver", Start: start, Seq: 2}, "peer", func() { done++ })
		time.Sleep(59 * time.Second)
		if !tr.Pending("leaver", start, 2, true) {
			t.Fatal("not pending within the wait")
		}
		time.Sleep(time.Second)
		if tr.Pending("leaver", start, 2, true) || done != 1 {
			t.Fatalf("pending past the wait (record done %d times)", done)
		}
	})
}
