package handover

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/config"

	"github.com/shoal-dev/shoal/internal/testutil"
	"github.com/shoal-dev/shoal/placement"
	"github.com/shoal-dev/shoal/wal"
)

// fakeHolds holds a backlog's queues from its start until released.
type fakeHolds struct {
	mu       sync.Mutex
	state    []byte
	release  func()
	steps    int
	acked    uint64
	closed   bool
	released bool
}

func (f *fakeHolds) keep(state []byte, q placement.HoldQueues) (CarriedHolds, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = state
	f.release = q.Hold(wal.Position{})
	return f, nil
}

func (f *fakeHolds) Step() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.steps++
	if f.released {
		f.release()
		return 0
	}
	return 1
}

func (f *fakeHolds) AckedSeq() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.acked
}

func (f *fakeHolds) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
}

func (f *fakeHolds) with(fn func(*fakeHolds)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// A backlog whose leaver was behind a hold is sent behind the same hold:
// nothing reaches the remote end until the hold goes, and how far the
// leaver's fences are delivered is announced as it moves.
func TestBacklogIsSentBehindItsLeaversHolds(t *testing.T) {
	defer func(d time.Duration) { deliverPoll = d }(deliverPoll)
	deliverPoll = 10 * time.Millisecond
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	src := t.TempDir()
	writeBacklog(t, src, 100)
	h := Header{ID: testID, Node: "leaver", Start: 1000, Seq: 3, HandOff: []byte(`{"version":1,"fencedSeq":3}`)}
	cl := newFakeCluster("carrier")
	s := newTestService(t, cl, Options{})
	holds := &fakeHolds{}
	s.SetHolds(holds.keep)
	if code, a := post(t, s, encodeWith(t, src, h)); code != http.StatusOK {
		t.Fatalf("transfer refused: %d %+v", code, a)
	}
	cfg, err := config.Load("remote_write:\n  - url: "+srv.URL+"\n    name: rcv\n    queue_config: {batch_send_deadline: 10ms}\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.ApplyConfig(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	testutil.EventuallyTrue(t, 10*time.Second, "the delivery polls its holds", func() bool {
		var n int
		holds.with(func(f *fakeHolds) { n = f.steps })
		return n >= 20
	})
	if n := requests.Load(); n != 0 {
		t.Fatalf("%d requests reached the remote end while the leaver's hold is in force", n)
	}
	holds.with(func(f *fakeHolds) {
		if !bytes.Equal(f.state, h.HandOff) {
			t.Errorf("holds kept from state %s, want the leaver's %s", f.state, h.HandOff)
		}
		f.acked = 2
	})
	testutil.EventuallyTrue(t, 10*time.Second, "the carrier announces fence 2 delivered", func() bool {
		cs := cl.Self().Carried
		return len(cs) == 1 && cs[0].Acked == 2 && cs[0].Seq == 3
	})
	holds.with(func(f *fakeHolds) { f.released = true })
	testutil.EventuallyTrue(t, 10*time.Second, "the backlog is delivered once the hold goes", func() bool {
		pend, err := s.store.Pending()
		return err == nil && len(pend) == 0 && len(cl.Self().Carried) == 0
	})
	if requests.Load() == 0 {
		t.Fatal("delivered without a request to the remote end")
	}
	holds.with(func(f *fakeHolds) {
		if !f.closed {
			t.Error("the holds were not closed after the delivery")
		}
	})
}
