package remotewrite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/wlog"

	"github.com/shoal-dev/shoal/wal"
)

// walWriter drives a real wal.Storage with small segments: 10 series, one
// sample each per commit, with timestamps that step by a second from now.
type walWriter struct {
	t    *testing.T
	s    *wal.Storage
	refs []storage.SeriesRef
	ts   int64
	sent []int64 // every timestamp committed, in order
	segs []int   // the segment each of sent was committed to (before the write)
}

const raceSeries = 200

func newWALWriter(t *testing.T, dir string, pending func() (int, bool)) *walWriter {
	t.Helper()
	s, err := wal.Open(dir, wal.Options{SegmentSize: 32 * 1024, PendingSegment: pending}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &walWriter{t: t, s: s, refs: make([]storage.SeriesRef, raceSeries), ts: time.Now().UnixMilli()}
}

func (w *walWriter) round() {
	w.t.Helper()
	a := w.s.AppenderV2(context.Background())
	for i := range w.refs {
		ref, err := a.Append(w.refs[i], labels.FromStrings("__name__", "test_metric", "i", fmt.Sprint(i)), 0, w.ts, float64(w.ts), nil, nil, storage.AOptions{})
		if err != nil {
			w.t.Fatal(err)
		}
		w.refs[i] = ref
	}
	if err := a.Commit(); err != nil {
		w.t.Fatal(err)
	}
	w.sent = append(w.sent, w.ts)
	w.segs = append(w.segs, w.lastSegment())
	w.ts += 1000
}

func (w *walWriter) lastSegment() int {
	_, last, err := wlog.Segments(w.s.Dir())
	if err != nil {
		w.t.Fatal(err)
	}
	return last
}

// untilSegment writes rounds until segment n is the live one.
func (w *walWriter) untilSegment(n int) {
	for w.lastSegment() < n {
		w.round()
	}
}

// since returns the timestamps committed while segment seg or a later one was live.
func (w *walWriter) since(seg int) []int64 {
	var out []int64
	for i, ts := range w.sent {
		if w.segs[i] >= seg {
			out = append(out, ts)
		}
	}
	return out
}

// bigQueue sends large batches: these tests move tens of thousands of samples.
const bigQueue = `
    queue_config:
      batch_send_deadline: 20ms
      max_samples_per_send: 2000
      capacity: 4000
      max_shards: 2
`

func seriesIdx() []int {
	idx := make([]int, raceSeries)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

func setOpenHook(t *testing.T, f func(stage string)) {
	testHookOpen = f
	t.Cleanup(func() { testHookOpen = nil })
}

// A queue re-added by a reload resumes from its saved position in segment 3;
// its series records are only in segment 0. A truncation pass that chose
// its segments before the queue existed (so only segment 3 on is needed)
// runs inside the queue's open, at each point where the reader's view of
// the WAL could tear. The queue must find every series in the new
// checkpoint: every later sample arrives once, nothing is counted as
// dropped or skipped.
func TestTruncationDuringQueueOpenLosesNoSeries(t *testing.T) {
	for _, stage := range []string{"checkpoint", "segments"} {
		t.Run(stage, func(t *testing.T) {
			walDir, progDir := dirs(t)
			var pending atomic.Int64
			pending.Store(0)
			w := newWALWriter(t, walDir, func() (int, bool) { return int(pending.Load()), true })
			w.untilSegment(3)
			w.untilSegment(5) // segments 3 and 4 complete, 5 live
			if err := writeProgress(filepath.Join(progDir, "b.json"), progressFile{Version: progressVersion, Queue: "b", Segment: 3}); err != nil {
				t.Fatal(err)
			}
			// What the queues that existed before the reload needed.
			pending.Store(3)

			ran := 0
			setOpenHook(t, func(s string) {
				if s != stage || ran > 0 {
					return
				}
				ran++
				if err := w.s.Truncate(); err != nil {
					t.Errorf("truncate inside open: %v", err)
				}
			})
			rcv := newReceiver(t)
			tm := startManager(t, walDir, progDir, loadConfig(t, `
global:
  external_labels: {cluster: c1}
remote_write:
  - url: URL0
    name: b
`+bigQueue, rcv.srv.URL))
			want := w.since(3)
			waitFor(t, "samples from segment 3 on", func() bool { d, _ := rcv.count(); return d >= raceSeries*len(want) })
			tm.shutdown(t, 5*time.Second)
			if ran != 1 {
				t.Fatalf("the open hook ran %d times at stage %q", ran, stage)
			}
			if first, _, _ := wlog.Segments(walDir); first != 3 {
				t.Fatalf("truncation inside open left segment %d first, want 3 (it did not run as intended)", first)
			}
			checkAll(t, rcv, seriesIdx(), want)
			if v := tm.metric(t, "prometheus_remote_storage_samples_dropped_total", "remote_name", "b", "reason", reasonUnknownSeries); v > 0 {
				t.Fatalf("%v samples dropped for unknown series", v)
			}
			if v := tm.metric(t, "shoal_remotewrite_segments_skipped_total", "remote_name", "b"); v != 0 {
				t.Fatalf("segments_skipped_total = %v, want 0", v)
			}
		})
	}
}

// addQueueFixture is a manager whose queue a has sent and persisted a WAL
// of four segments, ready for a reload that adds queue b.
type addQueueFixture struct {
	w      *walWriter
	ra, rb *receiver
	tm     *testManager
	qa     string
}

func newAddQueueFixture(t *testing.T) *addQueueFixture {
	walDir, progDir := dirs(t)
	var m atomic.Pointer[testManager]
	f := &addQueueFixture{ra: newReceiver(t), rb: newReceiver(t)}
	f.w = newWALWriter(t, walDir, func() (int, bool) {
		if tm := m.Load(); tm != nil {
			return tm.PendingSegment()
		}
		return 0, true
	})
	f.w.untilSegment(4)
	f.qa = `
global:
  external_labels: {cluster: c1}
remote_write:
  - url: URL0
    name: a
` + bigQueue
	f.tm = startManager(t, walDir, progDir, loadConfig(t, f.qa, f.ra.srv.URL, f.rb.srv.URL))
	m.Store(f.tm)
	waitFor(t, "queue a caught up", func() bool { d, _ := f.ra.count(); return d >= raceSeries*len(f.w.sent) })
	// a has acknowledged everything: its progress file reaches segment 4.
	waitFor(t, "queue a persisted", func() bool { s, ok := f.tm.PendingSegment(); return ok && s == 4 })
	return f
}

// addQueueB reloads with queue b added.
func (f *addQueueFixture) addQueueB(t *testing.T) {
	if err := f.tm.ApplyConfig(loadConfig(t, f.qa+`
  - url: URL1
    name: b
`+bigQueue, f.ra.srv.URL, f.rb.srv.URL)); err != nil {
		t.Fatal(err)
	}
}

// bSendsEverything waits until b has sent the whole WAL, stops the
// manager and checks that b delivered every sample.
func (f *addQueueFixture) bSendsEverything(t *testing.T) {
	waitFor(t, "queue b sends the whole WAL", func() bool { d, _ := f.rb.count(); return d >= raceSeries*len(f.w.sent) })
	f.tm.shutdown(t, 5*time.Second)
	checkAll(t, f.rb, seriesIdx(), f.w.sent)
}

// A reload adds a queue while another one is caught up. The WAL's truncation
// asks the manager what is still needed, and runs inside the new queue's
// open: the new queue, which starts at the oldest data, must hold the WAL
// back until it knows where it starts, and then send everything.
func TestReloadAddingQueueHoldsTruncation(t *testing.T) {
	f := newAddQueueFixture(t)
	ran := 0
	setOpenHook(t, func(s string) {
		if s != "segments" || ran > 0 {
			return
		}
		ran++
		if err := f.w.s.Truncate(); err != nil {
			t.Errorf("truncate inside open: %v", err)
		}
	})
	f.addQueueB(t)
	f.bSendsEverything(t)
	if ran != 1 {
		t.Fatalf("the open hook ran %d times", ran)
	}
	if v := f.tm.metric(t, "prometheus_remote_storage_samples_dropped_total", "remote_name", "b", "reason", reasonUnknownSeries); v > 0 {
		t.Fatalf("%v samples dropped for unknown series", v)
	}
	if v := f.tm.metric(t, "shoal_remotewrite_segments_skipped_total", "remote_name", "b"); v != 0 {
		t.Fatalf("segments_skipped_total = %v, want 0", v)
	}
}

// A truncation that runs the moment the new queue's goroutine starts (in
// practice it always comes after ApplyConfig published the queue, so the
// window between start and publish is forced here) must see the started
// queue and keep the data it still has to send.
func TestTruncationRightAfterQueueStartKeepsItsData(t *testing.T) {
	f := newAddQueueFixture(t)
	ran := 0
	hook := func() {
		ran++
		if err := f.w.s.Truncate(); err != nil {
			t.Errorf("truncate right after start: %v", err)
		}
	}
	testHookStarted.Store(&hook)
	t.Cleanup(func() { testHookStarted.Store(nil) })
	f.addQueueB(t)
	testHookStarted.Store(nil)
	f.bSendsEverything(t)
	if ran != 1 {
		t.Fatalf("the start hook ran %d times", ran)
	}
}
