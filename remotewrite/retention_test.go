package remotewrite

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/wlog"

	"github.com/shoal-dev/shoal/wal"
)

// The remote end is down while the WAL grows past its max size: the oldest
// segments go although the queue still needs them. When the remote end
// returns, the queue resumes at the first remaining segment: everything
// from there on arrives once, the lost segments are counted, and no sample
// is dropped for an unknown series (their series are in the checkpoint).
func TestQueueResumesAfterMaxSizeDroppedItsSegments(t *testing.T) {
	walDir, progDir := dirs(t)
	var m atomic.Pointer[testManager]
	const segSize = 32 * 1024
	s, err := wal.Open(walDir, wal.Options{
		SegmentSize: segSize,
		MaxSize:     4 * segSize,
		PendingSegment: func() (int, bool) {
			if tm := m.Load(); tm != nil {
				return tm.PendingSegment()
			}
			return 0, true
		},
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := &walWriter{t: t, s: s, refs: make([]storage.SeriesRef, raceSeries), ts: time.Now().UnixMilli()}

	rcv := newReceiver(t)
	var down atomic.Bool
	down.Store(true)
	rcv.respond = func(int, *prompb.WriteRequest, http.ResponseWriter) int {
		if down.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	tm := startManager(t, walDir, progDir, loadConfig(t, `
global:
  external_labels: {cluster: c1}
remote_write:
  - url: URL0
    name: q
`+bigQueue+`      min_backoff: 5ms
      max_backoff: 20ms
`, rcv.srv.URL))
	m.Store(tm)
	w.untilSegment(9)
	tm.Notify()
	waitFor(t, "the queue to try", func() bool {
		rcv.mtx.Lock()
		defer rcv.mtx.Unlock()
		return rcv.requests > 0
	})
	if p, ok := tm.PendingSegment(); !ok || p != 0 {
		t.Fatalf("pending segment %d %v while the remote end is down, want 0", p, ok)
	}
	if err := s.Truncate(); err != nil {
		t.Fatal(err)
	}
	first, last, err := wlog.Segments(walDir)
	if err != nil {
		t.Fatal(err)
	}
	if first < 4 {
		t.Fatalf("max size kept segments %d-%d", first, last)
	}

	down.Store(false)
	want := w.since(first)
	waitFor(t, "the remaining segments delivered", func() bool {
		for _, ts := range want {
			for i := range raceSeries {
				if rcv.has(series(i), ts) == 0 {
					return false
				}
			}
		}
		return true
	})
	tm.shutdown(t, 5*time.Second)
	if _, dups := rcv.count(); dups != 0 {
		t.Fatalf("%d samples arrived twice", dups)
	}
	if v := tm.metric(t, "prometheus_remote_storage_samples_dropped_total", "remote_name", "q", "reason", reasonUnknownSeries); v > 0 {
		t.Fatalf("%v samples dropped for unknown series", v)
	}
	// The reader finishes the segment(s) it has open; the rest before first is lost.
	if v := tm.metric(t, "shoal_remotewrite_segments_skipped_total", "remote_name", "q"); v < 1 || v > float64(first) {
		t.Fatalf("segments_skipped_total = %v, want 1..%d", v, first)
	}
	if p, _ := tm.PendingSegment(); p < first {
		t.Fatalf("pending segment %d after catching up, want >= %d", p, first)
	}
}
