package remotewrite

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/prometheus/prometheus/util/compression"

	"github.com/shoal-dev/shoal/wal"
)

// Review: a crash that tears the WAL's tail (SIGKILL mid-append) also leaves
// the acknowledgement journal of the requests acknowledged since the last
// progress write. The restart repairs the WAL (the repair generation moves
// on), and the journal, whose header names the old generation, is thrown
// away although everything it covers lies before the cut. The queue then
// re-sends the acknowledged rounds mixed with never-sent ones; a Prometheus
// receiver refuses those requests as out of order and the never-sent samples
// are dropped with them.
func TestReviewTornWALTailKeepsJournal(t *testing.T) {
	old := persistInterval
	persistInterval = time.Hour // only the first round's position is saved
	t.Cleanup(func() { persistInterval = old })

	walDir, progDir := dirs(t)
	const hangAt = 5 // request 5 (round 6) is cancelled, never applied
	rcv := startRealReceiver(t, hangAt, false)
	url := rcv.srv.URL + "/api/v1/write"
	opts := wal.Options{SegmentSize: 1 << 20, Compression: compression.None}
	series := make([]labels.Labels, 20)
	for i := range series {
		series[i] = labels.FromStrings("__name__", "test_metric", "i", fmt.Sprint(i))
	}
	ts := time.Now().Add(-time.Minute).UnixMilli()
	appendRound := func(s *wal.Storage) {
		t.Helper()
		app := s.AppenderV2(t.Context())
		for _, ls := range series {
			if _, err := app.Append(0, ls, 0, ts, float64(ts), nil, nil, storage.AOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
		ts += 1000
	}
	open := func() *wal.Storage {
		t.Helper()
		s, err := wal.Open(walDir, opts, nil, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	s := open()
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, url))
	for k := range hangAt + 1 {
		appendRound(s)
		tm.Notify()
		if k < hangAt {
			waitFor(t, fmt.Sprintf("round %d acknowledged", k), func() bool { return rcv.count(t) == (k+1)*len(series) })
		}
	}
	<-rcv.hung
	tm.shutdown(t, 100*time.Millisecond) // as a crash: round 6 never settled
	if pf := readProgressFile(t, filepath.Join(progDir, "q.json")); pf.Offset == 0 {
		t.Fatal("no position saved after the first round")
	}

	// Three more rounds that are never sent, the last one torn by the crash.
	for range 3 {
		appendRound(s)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ends := recordEnds(t, walDir, 0)
	n := len(ends)
	if err := os.Truncate(wlog.SegmentName(walDir, 0), (ends[n-2]+ends[n-1])/2); err != nil {
		t.Fatal(err)
	}
	s = open() // repairs the torn tail
	defer s.Close()
	if r, _ := wal.ReadRepairs(walDir); r.Generation != 1 {
		t.Fatalf("repair record %+v, want generation 1", r)
	}
	for range 2 {
		appendRound(s)
	}

	tm = startManager(t, walDir, progDir, loadConfig(t, oneQueue, url))
	// Rounds 1..6, the two whole rounds kept by the repair, two after it.
	want := (hangAt + 1 + 2 + 2) * len(series)
	failed := func() float64 {
		return tm.metric(t, "prometheus_remote_storage_samples_failed_total", "remote_name", "q")
	}
	waitFor(t, "every sample at the receiver, or some dropped", func() bool {
		tm.Notify()
		return rcv.count(t) == want || failed() > 0
	})
	tm.shutdown(t, 5*time.Second)
	if v := failed(); v != 0 {
		t.Fatalf("%v samples dropped after the repair; receiver holds %d of %d samples; receiver %+v",
			v, rcv.count(t), want, rcv.Stats())
	}
	if got := rcv.count(t); got != want {
		t.Fatalf("receiver holds %d samples, want %d", got, want)
	}
}

// Review: a journal whose tail is torn (a short write: disk full, a machine
// crash) is read up to the tear, and the queue then appends the records of
// its next run after the torn bytes. A second crash during that run's
// recovery hides every record it wrote: the reader stops at the old tear.
func TestReviewJournalAppendAfterTornTail(t *testing.T) {
	j := newJournal(filepath.Join(t.TempDir(), "q.acks"))
	base := position{Segment: 3, Offset: 100}
	if err := j.open(base, 0, false, 0); err != nil {
		t.Fatal(err)
	}
	id, err := j.intent([]item{{ref: 1, t: 10}}, position{Segment: 3, Offset: 200})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.done(id); err != nil {
		t.Fatal(err)
	}
	j.close()
	// A torn record: a frame announcing 100 bytes, of which 3 made it.
	f, err := os.OpenFile(j.path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{100, 0, 0, 0, 1, 2, 3, 4, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// The next run recovers what is whole, keeps the journal and settles
	// a request of another series.
	rec, err := j.load(base, 0)
	if err != nil || rec == nil || rec.acked[wmKey{ref: 1}] != 10 {
		t.Fatalf("first load: %+v, %v; want series 1 acknowledged at 10", rec, err)
	}
	if err := j.open(base, 0, true, 1000); err != nil {
		t.Fatal(err)
	}
	id, err = j.intent([]item{{ref: 2, t: 20}}, position{Segment: 3, Offset: 300})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.done(id); err != nil {
		t.Fatal(err)
	}
	j.close()

	rec, err = j.load(base, 0)
	if err != nil || rec == nil {
		t.Fatalf("second load: %+v, %v", rec, err)
	}
	if got, ok := rec.acked[wmKey{ref: 2}]; !ok || got != 20 {
		t.Fatalf("series 2 acknowledged at %d (%v) after the second run, want 20: records after the old tear are lost", got, ok)
	}
}

// Review: a queue without a progress file (first start, a new
// remote_write, an unreadable file) writes its journal but never reads it
// back: openJournal only loads it when a saved position was found. A crash
// during the first round (which lasts the whole outage if the remote end is
// down at first start) re-sends it in new groupings; a request mixing the
// applied-but-unanswered request's samples with never-sent ones is refused
// as out of order by a Prometheus receiver, and the never-sent ones are lost.
func TestReviewFirstRoundCrashWithoutProgressFile(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	const hangAt = 1 // the first round's second request: applied, never answered
	rcv := startRealReceiver(t, hangAt, true)
	url := rcv.srv.URL + "/api/v1/write"
	refs := tw.fleet(1, 10)
	base := time.Now().Add(-time.Minute).UnixMilli()
	ts := func(k int) int64 { return base + int64(k)*1000 }
	// 80 samples: one round of two requests (50 acknowledged, 30 applied and
	// never answered).
	for k := range 8 {
		tw.samples(refs, ts(k))
	}
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, url))
	<-rcv.hung
	waitFor(t, "both requests applied", func() bool { return rcv.count(t) == 80 })
	tm.shutdown(t, 100*time.Millisecond) // as a crash: the round never ended
	if _, err := os.Stat(filepath.Join(progDir, "q.json")); err == nil {
		t.Fatal("a progress file was written: the first round ended")
	}

	for k := 8; k < 12; k++ {
		tw.samples(refs, ts(k))
	}
	tm = startManager(t, walDir, progDir, loadConfig(t, oneQueue, url))
	const want = 12 * 10
	failed := func() float64 {
		return tm.metric(t, "prometheus_remote_storage_samples_failed_total", "remote_name", "q")
	}
	waitFor(t, "every sample at the receiver, or a request refused", func() bool {
		tm.Notify()
		return rcv.count(t) == want || failed() > 50 // the 50 acknowledged ones refused again
	})
	tm.shutdown(t, 5*time.Second)
	if got := rcv.count(t); got != want {
		t.Fatalf("receiver holds %d samples, want %d; %v samples dropped after the restart; receiver %+v",
			got, want, failed(), rcv.Stats())
	}
}

// Review: when a WAL limit (--storage.wal.max-size or max-age) deleted the
// segment of the saved position, the queue starts at the first remaining
// segment and ignores the journal, whose header names the saved position.
// The acknowledged rounds after it are re-sent mixed with never-sent ones
// and refused as out of order: data within the limits is lost.
func TestReviewJournalAfterLimitDeletedSavedSegment(t *testing.T) {
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
