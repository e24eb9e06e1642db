package remotewrite

import (
	"fmt"
	"testing"

	"github.com/shoal-dev/shoal/wal"
)

// slowQueue never sends on its own within a test: only FlushNow (or a full
// batch) makes it send.
const slowQueue = `
    queue_config:
      batch_send_deadline: 1h
      min_backoff: 5ms
      max_backoff: 40ms
`

func (tw *testWAL) end() wal.Position {
	tw.t.Helper()
	seg, off, err := tw.w.LastSegmentAndOffset()
	if err != nil {
		tw.t.Fatal(err)
	}
	return wal.Position{Segment: seg, Offset: int64(off)}
}

func TestFlushNowSendsBeforeTheBatchDeadline(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	refs := tw.fleet(1, 3)
	tm := startManager(t, walDir, progDir, loadConfig(t, "remote_write:\n  - url: URL0\n"+slowQueue, rcv.srv.URL))
	writeRounds(tw, refs, 1000, 4)
	end := tw.end()
	if tm.Acked(end) {
		t.Fatal("Acked before anything was sent")
	}
	tm.FlushNow(end)
	waitFor(t, "flushed samples acknowledged", func() bool { return tm.Acked(end) })
	if n, dups := rcv.count(); n != 12 || dups != 0 {
		t.Fatalf("receiver has %d samples (%d duplicates), want 12 and 0", n, dups)
	}
}

func TestHoldKeepsLaterRecordsUntilReleased(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	refs := tw.fleet(1, 2)
	tm := startManager(t, walDir, progDir, loadConfig(t, "remote_write:\n  - url: URL0\n"+fastQueue, rcv.srv.URL))
	writeRounds(tw, refs, 1000, 3)
	held := tw.end()
	hold := tm.Hold(held)
	// A new segment between the hold and the later records: the hold must
	// also stop the reader at a segment boundary.
	tw.nextSegment()
	writeRounds(tw, refs, 4000, 3)
	after := tw.end()
	tm.FlushNow(after)

	waitFor(t, "records before the hold acknowledged", func() bool { return tm.Acked(held) })
	// The queue has read past the hold (the later records are in the WAL
	// and a flush was asked for), yet it must not send them.
	if tm.Acked(after) {
		t.Fatal("records after the hold were acknowledged while held")
	}
	for _, r := range refs {
		s := fmt.Sprintf(`{__name__="test_metric", i="%d"}`, r)
		if rcv.has(s, 3000) != 1 {
			t.Fatalf("%s@3000 (before the hold) not received exactly once", s)
		}
		if rcv.has(s, 4000) != 0 {
			t.Fatalf("%s@4000 (after the hold) was sent while held", s)
		}
	}
	hold()
	hold() // idempotent
	waitFor(t, "held records sent after release", func() bool { return tm.Acked(after) })
	if n, dups := rcv.count(); n != 12 || dups != 0 {
		t.Fatalf("receiver has %d samples (%d duplicates), want 12 and 0", n, dups)
	}
}

// A hold and a fence at the very start of a segment (a restarted node's
// WAL end, or one just after a segment cut) are the same point as the end
// of the segment before: once everything before it is delivered the
// fence is acknowledged, although the reader has already read the next
// segment's first record and kept it back. Otherwise a node's own hold
// would keep its fence unacknowledged, and every peer holding for that
// fence would wait for the hand-off timeout.
func TestHoldAtSegmentStartLetsEverythingBeforeItBeAcked(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	refs := tw.fleet(1, 2)
	tm := startManager(t, walDir, progDir, loadConfig(t, "remote_write:\n  - url: URL0\n"+fastQueue, rcv.srv.URL))
	writeRounds(tw, refs, 1000, 3)
	tw.nextSegment()
	at := tw.end()
	if at.Offset != 0 {
		t.Fatalf("WAL end after a new segment is %+v, want its start", at)
	}
	// Held before the later records exist: a hold placed after the queue
	// could read them would race with their sending.
	hold := tm.Hold(at)
	defer hold()
	writeRounds(tw, refs, 4000, 3)
	tm.Notify()
	tm.FlushNow(at)
	waitFor(t, "everything before the segment's start acknowledged", func() bool { return tm.Acked(at) })
	for _, r := range refs {
		s := fmt.Sprintf(`{__name__="test_metric", i="%d"}`, r)
		if rcv.has(s, 3000) != 1 || rcv.has(s, 4000) != 0 {
			t.Fatalf("%s: the last sample before the hold received %d times, the first after it %d times; want 1 and 0", s, rcv.has(s, 3000), rcv.has(s, 4000))
		}
	}
}

func TestNestedHoldsTheLowestWins(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	refs := tw.fleet(1, 1)
	tm := startManager(t, walDir, progDir, loadConfig(t, "remote_write:\n  - url: URL0\n"+fastQueue, rcv.srv.URL))
	writeRounds(tw, refs, 1000, 1)
	p1 := tw.end()
	h1 := tm.Hold(p1)
	writeRounds(tw, refs, 2000, 1)
	p2 := tw.end()
	h2 := tm.Hold(p2)
	writeRounds(tw, refs, 3000, 1)
	p3 := tw.end()
	waitFor(t, "first round acknowledged", func() bool { return tm.Acked(p1) })
	h2()
	if tm.Acked(p2) {
		t.Fatal("releasing the higher hold let records past the lower one through")
	}
	h1()
	waitFor(t, "everything acknowledged", func() bool { return tm.Acked(p3) })
}

func TestAckedWithoutQueues(t *testing.T) {
	m, err := NewManager(t.TempDir(), t.TempDir(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Acked(wal.Position{}) {
		t.Fatal("Acked before the first configuration")
	}
	if err := m.ApplyConfig(loadConfig(t, "global: {}\n")); err != nil {
		t.Fatal(err)
	}
	if !m.Acked(wal.Position{Segment: 9}) {
		t.Fatal("Acked is false with no remote_write configured")
	}
}
