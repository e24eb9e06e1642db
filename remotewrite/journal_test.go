package remotewrite

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/prometheus/tsdb/chunks"
)

// A torn last record (a crash mid-append) ends the journal; what came
// before still counts, and a journal written for another position is ignored.
func TestJournalTornTailAndBase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.acks")
	j := newJournal(path)
	base := position{Segment: 3, Offset: 100}
	if err := j.open(base, 0, false, 1); err != nil {
		t.Fatal(err)
	}
	items := []item{{ref: 1, t: 10}, {ref: 1, t: 20}, {ref: 2, t: 15}, {ref: 2, kind: kindExemplar, t: 15}}
	id1, _ := j.intent(items, position{Segment: 3, Offset: 500})
	if err := j.done(id1); err != nil {
		t.Fatal(err)
	}
	if _, err := j.intent([]item{{ref: 1, t: 30}}, position{Segment: 4, Offset: 50}); err != nil {
		t.Fatal(err)
	}
	id3, _ := j.intent([]item{{ref: 2, t: 40}}, position{Segment: 4, Offset: 80})
	j.close()
	// Tear the last record: its "done" must not count.
	_ = id3
	// As the queue does: load, then keep what was loaded and append after it.
	j2 := newJournal(path)
	if _, err := j2.load(base, 0); err != nil {
		t.Fatal(err)
	}
	if err := j2.open(base, 0, true, 100); err != nil {
		t.Fatal(err)
	}
	j2.f.Write([]byte{9, 0, 0, 0, 1, 2}) // a torn record header
	j2.close()

	r, err := newJournal(path).load(base, 0)
	if err != nil || r == nil {
		t.Fatalf("load: %v, %v", r, err)
	}
	for _, c := range []struct {
		ref        chunks.HeadSeriesRef
		ex         bool
		t          int64
		skip       bool
		pendingSet bool
	}{
		{1, false, 20, true, false},
		{1, false, 25, false, true}, // covered by the unsettled intent (max 30)
		{1, false, 31, false, false},
		{2, false, 15, true, false},
		{2, true, 15, true, false},
		{2, true, 16, false, false},
		{2, false, 40, false, true},
	} {
		skip, group := r.classify(c.ref, c.ex, c.t)
		if skip != c.skip || (group != 0) != c.pendingSet {
			t.Errorf("classify(%d, ex=%v, %d) = %v, %d; want skip %v, pending %v", c.ref, c.ex, c.t, skip, group, c.skip, c.pendingSet)
		}
	}
	if r.end != (position{Segment: 4, Offset: 80}) {
		t.Errorf("recovery end = %+v, want 4/80", r.end)
	}
	if r, err := newJournal(path).load(position{Segment: 3, Offset: 101}, 0); r != nil || err != nil {
		t.Errorf("journal for another base: %v, %v; want ignored", r, err)
	}
	if r, err := newJournal(path).load(base, 1); r != nil || err != nil {
		t.Errorf("journal for another repair generation: %v, %v; want ignored", r, err)
	}
}

// A journal whose tail is torn (a short write: disk full, a machine
// crash) is read up to the tear, and the queue then appends the records of
// its next run after the torn bytes. A second crash during that run's
// recovery hides every record it wrote: the reader stops at the old tear.
func TestJournalAppendAfterTornTailStaysReadable(t *testing.T) {
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

// BenchmarkJournalRequest is the cost per request of the journal (intent +
// done, one write each, no fsync), with an fsync after each for comparison,
// and of one atomic progress file write.
func BenchmarkJournalRequest(b *testing.B) {
	items := make([]item, 2000)
	for i := range items {
		items[i] = item{ref: chunks.HeadSeriesRef(i % 500), t: int64(i)}
	}
	for _, fsync := range []bool{false, true} {
		name := "write"
		if fsync {
			name = "write+fsync"
		}
		b.Run(name, func(b *testing.B) {
			j := newJournal(filepath.Join(b.TempDir(), "q.acks"))
			if err := j.open(position{}, 0, false, 1); err != nil {
				b.Fatal(err)
			}
			defer j.close()
			for b.Loop() {
				id, _ := j.intent(items, position{})
				if fsync {
					_ = j.f.Sync()
				}
				_ = j.done(id)
				if fsync {
					_ = j.f.Sync()
				}
			}
		})
	}
	b.Run("progress-file", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "q.json")
		for b.Loop() {
			if err := writeProgress(path, progressFile{Version: progressVersion, UpdatedAt: time.Now()}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
