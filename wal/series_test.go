package wal

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/prometheus/prometheus/util/compression"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// Series whose labels share a hash are chained; every operation must find,
// replace and remove the right one wherever it sits in the chain.
func TestStripeSeriesHashCollisions(t *testing.T) {
	const hash = 42 // the same for all: every series collides
	s := newStripeSeries()
	lsets := []labels.Labels{
		labels.FromStrings("__name__", "a"),
		labels.FromStrings("__name__", "b"),
		labels.FromStrings("__name__", "c"),
	}
	for i, ls := range lsets {
		ms, created := s.getOrSet(newMemSeries(chunks.HeadSeriesRef(i+1), ls, hash, 0))
		if !created || ms.ref != chunks.HeadSeriesRef(i+1) {
			t.Fatalf("getOrSet(%s) = ref %d, created %v", ls, ms.ref, created)
		}
	}
	if ms, created := s.getOrSet(newMemSeries(9, lsets[1], hash, 0)); created || ms.ref != 2 {
		t.Fatalf("getOrSet of existing labels = ref %d, created %v; want ref 2, not created", ms.ref, created)
	}
	refOf := func(ls labels.Labels) chunks.HeadSeriesRef {
		if ms := s.getByLabels(hash, ls); ms != nil {
			return ms.ref
		}
		return 0
	}
	count := func() int {
		n := 0
		s.forEach(func(*memSeries) { n++ })
		return n
	}
	for i, ls := range lsets {
		if got := refOf(ls); got != chunks.HeadSeriesRef(i+1) {
			t.Errorf("getByLabels(%s) = %d, want %d", ls, got, i+1)
		}
	}

	// Replay found a newer ref for each: head, middle and tail of the chain.
	for i, ls := range lsets {
		old := s.getByRef(chunks.HeadSeriesRef(i + 1))
		s.replaceByLabels(old, newMemSeries(chunks.HeadSeriesRef(i+11), ls, hash, 10))
		s.deleteRef(old.ref)
	}
	for i, ls := range lsets {
		if got := refOf(ls); got != chunks.HeadSeriesRef(i+11) {
			t.Errorf("after replace, getByLabels(%s) = %d, want %d", ls, got, i+11)
		}
	}
	if n := count(); n != 3 {
		t.Errorf("forEach saw %d series after replacing, want 3", n)
	}

	// GC forgets the middle one (only it is older than the cutoff), then the rest.
	s.getByRef(12).touched = -1
	if v := s.gc(0); len(v) != 1 || v[0].ref != 12 {
		t.Fatalf("gc removed %d series, want only ref 12", len(v))
	}
	if refOf(lsets[1]) != 0 || refOf(lsets[0]) != 11 || refOf(lsets[2]) != 13 || count() != 2 {
		t.Errorf("after removing the middle: a=%d b=%d c=%d, %d series", refOf(lsets[0]), refOf(lsets[1]), refOf(lsets[2]), count())
	}
	if v := s.gc(100); len(v) != 2 {
		t.Fatalf("gc removed %d series, want 2", len(v))
	}
	if count() != 0 || len(s.hashes[hash&s.mask].m) != 0 {
		t.Errorf("after removing all: %d series, stripe map holds %d hashes", count(), len(s.hashes[hash&s.mask].m))
	}
}

// SeriesLabels answers with the label set a series was appended with, the
// same memory (what lets a remote-write queue keep no copy), also after a
// replay, and nothing for a ref the WAL does not hold.
func TestSeriesLabelsAreTheAppendedLabelSet(t *testing.T) {
	dir := t.TempDir()
	w := openTest(t, dir, DefaultOptions(), nil)
	series := makeSeries(3, "up")
	refs := appendFloats(t, w.Storage, series, w.clock.Ms(), 1)
	for i, ref := range refs {
		got, ok := w.SeriesLabels(chunks.HeadSeriesRef(ref))
		if !ok || !labels.Equal(got, series[i]) {
			t.Fatalf("series %d: %s (found %v), want %s", ref, got, ok, series[i])
		}
		if !testutil.SameLabelSet(got, series[i]) {
			t.Errorf("series %d: a copy of the appended label set, want the same", ref)
		}
	}
	if got, ok := w.SeriesLabels(chunks.HeadSeriesRef(refs[2] + 1)); ok {
		t.Errorf("unknown ref answered %s", got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = openTest(t, dir, DefaultOptions(), nil)
	for i, ref := range refs {
		if got, ok := w.SeriesLabels(chunks.HeadSeriesRef(ref)); !ok || !labels.Equal(got, series[i]) {
			t.Errorf("after replay, series %d: %s (found %v), want %s", ref, got, ok, series[i])
		}
	}
}

// LiveSegment is the last segment file whenever a commit has returned:
// across rotations inside a write (records of every size, compressed or
// not) and the truncation pass's rotation of an old live segment. Remote
// write reads the end of the WAL by it.
func TestLiveSegmentIsTheLastFileAfterEveryCommit(t *testing.T) {
	for _, c := range []compression.Type{compression.None, compression.Snappy} {
		t.Run(string(c), func(t *testing.T) {
			dir := t.TempDir()
			opts := smallOpts()
			opts.Compression = c
			opts.RotateAfter = time.Minute
			w := openTest(t, dir, opts, nil)
			check := func(when string) {
				t.Helper()
				_, last, err := wlog.Segments(dir)
				if err != nil {
					t.Fatal(err)
				}
				if got := w.LiveSegment(); got != last {
					t.Fatalf("%s: LiveSegment %d, last segment file %d", when, got, last)
				}
			}
			for i := range 60 {
				series := makeSeries(1+i%7*13, fmt.Sprintf("m%d", i)) // 1 to 79 new series a commit
				appendFloats(t, w.Storage, series, w.clock.Ms(), float64(i))
				check(fmt.Sprintf("commit %d", i))
				if i%20 == 19 {
					w.clock.Advance(2 * time.Minute)
					if err := w.Truncate(); err != nil {
						t.Fatal(err)
					}
					check(fmt.Sprintf("truncation after commit %d", i))
				}
			}
			if w.LiveSegment() < 3 {
				t.Fatalf("live segment %d at the end: too few rotations to tell", w.LiveSegment())
			}
		})
	}
}
