package remotewrite

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/prometheus/prometheus/util/compression"

	"github.com/shoal-dev/shoal/wal"
)

// A repair of the real WAL cuts a middle segment and reuses the segment
// numbers after it for new data. A queue whose saved position lies in a
// reused segment must re-read from the cut instead of skipping what is new.
func TestQueueResumesAfterWALRepairReusedSegments(t *testing.T) {
	walDir, progDir := dirs(t)
	rcv := newReceiver(t)
	cfg := loadConfig(t, oneQueue, rcv.srv.URL)
	opts := wal.Options{SegmentSize: 64 << 10, Compression: compression.None}

	series := make([]labels.Labels, 50)
	for i := range series {
		series[i] = labels.FromStrings("__name__", "m", "i", fmt.Sprint(i))
	}
	ts := time.Now().UnixMilli()
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
		ts++
	}
	open := func() *wal.Storage {
		t.Helper()
		s, err := wal.Open(walDir, opts, nil, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Fill segments 0..3 and send all of it: the saved position is in segment 3.
	s := open()
	rounds := 0
	for {
		appendRound(s)
		rounds++
		if _, last, _ := wlog.Segments(walDir); last >= 3 {
			break
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	tm := startManager(t, walDir, progDir, cfg)
	sent := rounds * len(series)
	waitFor(t, "the first rounds delivered", func() bool { d, _ := rcv.count(); return d == sent })
	tm.shutdown(t, 5*time.Second)
	progressPath := filepath.Join(progDir, "q.json")
	if pf := readProgressFile(t, progressPath); pf.Segment < 3 {
		t.Fatalf("saved position %d/%d, want it in segment 3", pf.Segment, pf.Offset)
	}

	// Damage segment 2 in its middle: the repair keeps what is before the
	// damage, deletes segment 3 and writes on at a new segment 3, where the
	// saved offset now points into new data.
	f, err := os.OpenFile(wlog.SegmentName(walDir, 2), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	if _, err := f.WriteAt([]byte("garbage garbage garbage garbage"), st.Size()/2); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s = open()
	firstNew := ts
	for range 20 {
		appendRound(s)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if r, _ := wal.ReadRepairs(walDir); r.Generation != 1 || r.Segment != 2 {
		t.Fatalf("repair record = %+v, want generation 1 at segment 2", r)
	}
	if _, last, _ := wlog.Segments(walDir); last != 3 {
		t.Fatalf("after the repair the last segment is %d, want the reused number 3", last)
	}

	tm = startManager(t, walDir, progDir, cfg)
	want := int(ts - firstNew)
	waitFor(t, "every sample appended after the repair", func() bool {
		for _, ls := range series {
			for x := firstNew; x < ts; x++ {
				if rcv.has(withCluster(ls), x) == 0 {
					return false
				}
			}
		}
		return true
	})
	tm.shutdown(t, 5*time.Second)
	total, _ := rcv.count()
	if total < sent+want*len(series) {
		t.Fatalf("receiver has %d distinct samples, want at least %d", total, sent+want*len(series))
	}
	pf := readProgressFile(t, progressPath)
	if pf.WALRepairs != 1 {
		t.Errorf("progress file records repair generation %d, want 1", pf.WALRepairs)
	}
}

// withCluster is the series as the receiver sees it: with oneQueue's external label.
func withCluster(ls labels.Labels) string {
	b := labels.NewBuilder(ls)
	b.Set("cluster", "c1")
	return b.Labels().String()
}

// A torn tail (a crash mid-record) is repaired by cutting the segment before
// the torn record. The queue's saved position lies before the cut, so it is
// still exact: nothing the receiver acknowledged is sent again, and what was
// appended after the position (and kept) or after the repair arrives once.
func TestTornTailRepairDoesNotResendAcknowledged(t *testing.T) {
	walDir, progDir := dirs(t)
	rcv := newReceiver(t)
	cfg := loadConfig(t, oneQueue, rcv.srv.URL)
	opts := wal.Options{SegmentSize: 1 << 20, Compression: compression.None}
	series := make([]labels.Labels, 20)
	for i := range series {
		series[i] = labels.FromStrings("__name__", "m", "i", fmt.Sprint(i))
	}
	ts := time.Now().UnixMilli()
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
		ts++
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
	for range 10 {
		appendRound(s)
	}
	tm := startManager(t, walDir, progDir, cfg)
	waitFor(t, "the first rounds delivered", func() bool { d, _ := rcv.count(); return d == 10*len(series) })
	tm.shutdown(t, 5*time.Second)
	saved := readProgressFile(t, filepath.Join(progDir, "q.json"))
	if saved.Segment != 0 || saved.Offset == 0 {
		t.Fatalf("saved position %d/%d, want inside segment 0", saved.Segment, saved.Offset)
	}

	// Three more rounds that are never sent, the last one torn by the crash.
	kept := ts
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

	s = open()
	r, _ := wal.ReadRepairs(walDir)
	if r.Generation != 1 || r.Segment != 0 || r.Offset <= saved.Offset {
		t.Fatalf("repair record = %+v, want generation 1 cutting segment 0 after the saved offset %d", r, saved.Offset)
	}
	after := ts
	for range 5 {
		appendRound(s)
	}
	defer s.Close()

	tm = startManager(t, walDir, progDir, cfg)
	// Kept: the two whole unsent rounds; then the five after the repair.
	want := 10*len(series) + 2*len(series) + 5*len(series)
	waitFor(t, "every kept and new sample", func() bool { d, _ := rcv.count(); return d >= want })
	tm.shutdown(t, 5*time.Second)
	if _, dups := rcv.count(); dups != 0 {
		t.Fatalf("%d samples arrived twice: the queue re-sent acknowledged data after the repair", dups)
	}
	for _, ls := range series {
		for _, x := range []int64{kept, kept + 1, after, ts - 1} {
			if rcv.has(withCluster(ls), x) != 1 {
				t.Fatalf("%s at %d arrived %d times, want once", ls, x, rcv.has(withCluster(ls), x))
			}
		}
	}
}

// recordEnds returns the offset just past each record in segment i.
func recordEnds(t *testing.T, dir string, i int) []int64 {
	t.Helper()
	seg, err := wlog.OpenReadSegment(wlog.SegmentName(dir, i))
	if err != nil {
		t.Fatal(err)
	}
	sr := wlog.NewSegmentBufReader(seg)
	defer sr.Close()
	rd := wlog.NewReader(sr)
	var ends []int64
	for rd.Next() {
		ends = append(ends, rd.Offset())
	}
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	return ends
}

// A crash that tears the WAL's tail (SIGKILL mid-append) also leaves
// the acknowledgement journal of the requests acknowledged since the last
// progress write. The restart repairs the WAL (the repair generation moves
// on), and the journal, whose header names the old generation, is thrown
// away although everything it covers lies before the cut. The queue then
// re-sends the acknowledged rounds mixed with never-sent ones; a Prometheus
// receiver refuses those requests as out of order and the never-sent samples
// are dropped with them.
func TestTornWALTailRepairKeepsJournal(t *testing.T) {
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
