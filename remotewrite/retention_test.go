package remotewrite

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/wlog"

	"github.com/shoal-dev/shoal/wal"
)

// The remote end is down while the WAL grows past its max size: the oldest
// segments go although the queue still needs them. When the remote end
// returns, the queue resumes at the first remaining segment: everything
// from there on arrives once, the lost segments are counted, and no sample
// is dropped for an unknown series (their series are in the checkpoint).
// Both with the WAL attached (the agent: the live segment and label sets
// asked in memory) and read from disk alone (a hand-over's backlog).
func TestQueueResumesAfterMaxSizeDroppedItsSegments(t *testing.T) {
	for _, attached := range []bool{true, false} {
		t.Run(fmt.Sprintf("attached=%v", attached), func(t *testing.T) { testResumeAfterMaxSize(t, attached) })
	}
}

func testResumeAfterMaxSize(t *testing.T, attached bool) {
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
	var local LocalWAL
	if attached {
		local = s
	}
	tm := startManagerOn(t, walDir, progDir, loadConfig(t, `
global:
  external_labels: {cluster: c1}
remote_write:
  - url: URL0
    name: q
`+bigQueue+`      min_backoff: 5ms
      max_backoff: 20ms
`, rcv.srv.URL), nil, local)
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

// When a WAL limit (--storage.wal.max-size or max-age) deleted the
// segment of the saved position, the queue starts at the first remaining
// segment and ignores the journal, whose header names the saved position.
// The acknowledged rounds after it are re-sent mixed with never-sent ones
// and refused as out of order: data within the limits is lost.
func TestJournalKeptWhenLimitDeletedSavedSegment(t *testing.T) {
	old := persistInterval
	persistInterval = time.Hour // only the first round's position is saved
	t.Cleanup(func() { persistInterval = old })

	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	const hangAt = 5 // round 5 is cancelled, never applied
	rcv := startRealReceiver(t, hangAt, false)
	url := rcv.srv.URL + "/api/v1/write"
	refs := tw.fleet(1, 10)
	base := time.Now().Add(-time.Minute).UnixMilli()
	ts := func(k int) int64 { return base + int64(k)*1000 }
	tw.samples(refs, ts(0))
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, url))
	waitFor(t, "round 0 acknowledged", func() bool { return rcv.count(t) == 10 })
	waitFor(t, "round 0 persisted", func() bool {
		_, err := os.Stat(filepath.Join(progDir, "q.json"))
		return err == nil
	})
	tw.nextSegment()
	for k := 1; k <= hangAt; k++ {
		tw.samples(refs, ts(k))
		tm.Notify()
		if k < hangAt {
			waitFor(t, fmt.Sprintf("round %d acknowledged", k), func() bool { return rcv.count(t) == (k+1)*10 })
		}
	}
	<-rcv.hung
	tm.shutdown(t, 100*time.Millisecond) // as a crash
	if pf := readProgressFile(t, filepath.Join(progDir, "q.json")); pf.Segment != 0 {
		t.Fatalf("saved segment %d, want 0", pf.Segment)
	}

	// A limit deletes segment 0 (checkpointing its series), as wal.Truncate does.
	if _, err := wlog.Checkpoint(testLogger(t), tw.w, 0, 0, func(chunks.HeadSeriesRef) bool { return true }, math.MaxInt64, false, false); err != nil {
		t.Fatal(err)
	}
	if err := tw.w.Truncate(1); err != nil {
		t.Fatal(err)
	}
	for k := hangAt + 1; k <= hangAt+2; k++ {
		tw.samples(refs, ts(k))
	}

	tm = startManager(t, walDir, progDir, loadConfig(t, oneQueue, url))
	const want = (hangAt + 3) * 10
	failed := func() float64 {
		return tm.metric(t, "prometheus_remote_storage_samples_failed_total", "remote_name", "q")
	}
	waitFor(t, "every sample at the receiver, or some dropped", func() bool {
		tm.Notify()
		return rcv.count(t) == want || failed() > 0
	})
	tm.shutdown(t, 5*time.Second)
	if got := rcv.count(t); got != want || failed() != 0 {
		t.Fatalf("receiver holds %d samples, want %d; %v samples dropped after the restart; receiver %+v",
			got, want, failed(), rcv.Stats())
	}
}
