package remotewrite

import (
	"sync/atomic"
	"testing"
	"time"
)

// Review: TestReloadAddingQueueHoldsTruncation runs its truncation inside
// the new queue's open, which in practice always comes after ApplyConfig
// published the queue whether or not publish precedes start: the window it
// guards (between `go q.run` and publish) is never hit. Here the pass runs
// synchronously the moment the queue's goroutine is started, so the test
// fails whenever a started queue is not yet visible to PendingSegment.
func TestReviewTruncationRightAfterQueueStartKeepsItsData(t *testing.T) {
	walDir, progDir := dirs(t)
	var m atomic.Pointer[testManager]
	w := newWALWriter(t, walDir, func() (int, bool) {
		if tm := m.Load(); tm != nil {
			return tm.PendingSegment()
		}
		return 0, true
	})
	w.untilSegment(4)
	ra, rb := newReceiver(t), newReceiver(t)
	qa := `
global:
  external_labels: {cluster: c1}
remote_write:
  - url: URL0
    name: a
` + bigQueue
	tm := startManager(t, walDir, progDir, loadConfig(t, qa, ra.srv.URL, rb.srv.URL))
	m.Store(tm)
	waitFor(t, "queue a caught up", func() bool { d, _ := ra.count(); return d >= raceSeries*len(w.sent) })
	waitFor(t, "queue a persisted", func() bool { s, ok := tm.PendingSegment(); return ok && s == 4 })

	ran := 0
	hook := func() {
		ran++
		if err := w.s.Truncate(); err != nil {
			t.Errorf("truncate right after start: %v", err)
		}
	}
	testHookStarted.Store(&hook)
	t.Cleanup(func() { testHookStarted.Store(nil) })
	if err := tm.ApplyConfig(loadConfig(t, qa+`
  - url: URL1
    name: b
`+bigQueue, ra.srv.URL, rb.srv.URL)); err != nil {
		t.Fatal(err)
	}
	testHookStarted.Store(nil)
	waitFor(t, "queue b sends the whole WAL", func() bool { d, _ := rb.count(); return d >= raceSeries*len(w.sent) })
	tm.shutdown(t, 5*time.Second)
	if ran != 1 {
		t.Fatalf("the start hook ran %d times", ran)
	}
	checkAll(t, rb, seriesIdx(), w.sent)
}
