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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/cluster"
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

// leaverToPeer returns a leaving Service whose only peer is the Service
// rcv (on rcvCl); the leaver sees rcv's announcements as soon as it has
// answered a transfer, as gossip would show them.
func leaverToPeer(t *testing.T) (s *Service, reg *prometheus.Registry, rcv *Service, rcvCl *fakeCluster) {
	t.Helper()
	rcvCl = newFakeCluster("peer")
	rcv = newTestService(t, rcvCl, Options{})
	var leaverCl *fakeCluster
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rcv.ServeHTTP(w, r)
		p := rcvCl.Self()
		p.Self, p.HTTPAddr = false, r.Host
		leaverCl.setPeers(p)
	})
	s, leaverCl, reg = leaverWith(t, h, 10*time.Second)
	return s, reg, rcv, rcvCl
}

func TestLeaveHandsOverAndMarksOwnProgressSent(t *testing.T) {
	s, reg, rcv, _ := leaverToPeer(t)
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
