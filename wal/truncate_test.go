package wal

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/wlog"
)

// fillUntil appends one sample to every series per commit, advancing the
// clock by step before each commit, until the WAL's last segment is at
// least seg.
func fillUntil(t *testing.T, w *testWAL, series []labels.Labels, step time.Duration, seg int) {
	t.Helper()
	for i := 0; ; i++ {
		if _, last := segmentRange(t, w.Dir()); last >= seg {
			return
		}
		if i > 100000 {
			t.Fatal("WAL does not grow")
		}
		w.clock.Advance(step)
		appendFloats(t, w.Storage, series, w.clock.Ms(), float64(i))
	}
}

func lastCheckpoint(t *testing.T, dir string) (string, int) {
	t.Helper()
	cp, idx, err := wlog.LastCheckpoint(dir)
	if err != nil {
		t.Fatalf("no checkpoint: %v", err)
	}
	return cp, idx
}

func TestTruncateRespectsPendingSegment(t *testing.T) {
	dir := t.TempDir()
	var pending atomic.Int64
	opts := smallOpts()
	opts.SeriesGCAge = 10 * time.Minute
	opts.PendingSegment = func() (int, bool) { return int(pending.Load()), true }
	w := openTest(t, dir, opts, nil)

	doomed := makeSeries(5, "doomed")
	alive := makeSeries(100, "alive")
	appendFloats(t, w.Storage, doomed, w.clock.Ms(), 1) // segment 0 only
	fillUntil(t, w, alive, 15*time.Second, 6)

	// A reader still needs segment 3: 0-2 go, 3 and later stay.
	pending.Store(3)
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	first, last := segmentRange(t, dir)
	if first != 3 || last < 6 {
		t.Fatalf("segments after truncation = %d-%d, want 3-%d or later", first, last, last)
	}
	for i := 3; i <= last; i++ {
		if _, err := os.Stat(wlog.SegmentName(dir, i)); err != nil {
			t.Errorf("pending segment %d is gone: %v", i, err)
		}
	}
	cp, idx := lastCheckpoint(t, dir)
	if idx != 2 {
		t.Fatalf("checkpoint index = %d, want 2", idx)
	}
	c := readRecords(t, cp)
	if len(c.samples) != 0 {
		t.Errorf("checkpoint holds %d samples, want none", len(c.samples))
	}
	// The idle series were forgotten, but segments 3+ were written while
	// they were known, so the checkpoint still names them.
	if got := len(c.series); got != len(alive)+len(doomed) {
		t.Errorf("first checkpoint holds %d series, want %d", got, len(alive)+len(doomed))
	}
	if n := w.counter(t, "shoal_wal_series_gc_total"); n != float64(len(doomed)) {
		t.Errorf("series GC counter = %v, want %d", n, len(doomed))
	}
	if w.ActiveSeries() != len(alive) {
		t.Errorf("active series = %d, want %d", w.ActiveSeries(), len(alive))
	}

	// Later, past the segment in which they were forgotten, they leave the checkpoint.
	fillUntil(t, w, alive, 15*time.Second, last+3)
	pending.Store(int64(last + 2))
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	cp2, idx2 := lastCheckpoint(t, dir)
	if idx2 != last+1 {
		t.Fatalf("second checkpoint index = %d, want %d", idx2, last+1)
	}
	if _, err := os.Stat(cp); !os.IsNotExist(err) {
		t.Errorf("old checkpoint %s still there (err %v)", cp, err)
	}
	c = readRecords(t, cp2)
	got := map[string]bool{}
	for _, s := range c.series {
		got[s.Labels.String()] = true
	}
	if len(c.series) != len(alive) {
		t.Errorf("second checkpoint holds %d series, want %d (alive only)", len(c.series), len(alive))
	}
	for _, ls := range alive {
		if !got[ls.String()] {
			t.Errorf("alive series %s missing from checkpoint", ls)
		}
	}
	if n := w.counter(t, "shoal_wal_truncations_total"); n != 2 {
		t.Errorf("truncations = %v, want 2", n)
	}
	if n := w.counter(t, "shoal_wal_segments_dropped_unsent_total"); n != 0 {
		t.Errorf("dropped unsent = %v, want 0", n)
	}

	// Reopen: checkpoint + remaining segments give back the same refs.
	refs := appendFloats(t, w.Storage, alive, w.clock.Ms()+1000, 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2 := openTest(t, dir, opts, w.clock)
	if w2.ActiveSeries() != len(alive) {
		t.Errorf("active series after reopen = %d, want %d", w2.ActiveSeries(), len(alive))
	}
	again := appendFloats(t, w2.Storage, alive, w.clock.Ms()+2000, 2)
	for i := range refs {
		if refs[i] != again[i] {
			t.Fatalf("ref of %s changed across reopen: %d -> %d", alive[i], refs[i], again[i])
		}
	}
}

func TestTruncateWithoutReaders(t *testing.T) {
	dir := t.TempDir()
	w := openTest(t, dir, smallOpts(), nil)
	fillUntil(t, w, makeSeries(50, "m"), time.Second, 4)
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	first, last := segmentRange(t, dir)
	if first != last {
		t.Fatalf("segments after truncation without readers = %d-%d, want only the live one", first, last)
	}
	if _, idx := lastCheckpoint(t, dir); idx != last-1 {
		t.Errorf("checkpoint index = %d, want %d", idx, last-1)
	}
}

func TestMaxAgeDropsPendingSegments(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts()
	opts.MaxAge = time.Hour
	opts.PendingSegment = func() (int, bool) { return 0, true } // a reader stuck at the start
	w := openTest(t, dir, opts, nil)
	series := makeSeries(50, "m")

	fillUntil(t, w, series, time.Second, 3)
	_, oldLast := segmentRange(t, dir) // holds old samples and (below) new ones

	w.clock.Advance(2 * time.Hour)
	fillUntil(t, w, series, time.Second, oldLast+2)

	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	first, _ := segmentRange(t, dir)
	if first != oldLast {
		t.Fatalf("first segment after truncation = %d, want %d (older ones past max age)", first, oldLast)
	}
	if n := w.counter(t, "shoal_wal_segments_dropped_unsent_total"); n != float64(oldLast) {
		t.Errorf("dropped unsent = %v, want %d", n, oldLast)
	}
	// Nothing else goes while the reader sits at segment 0.
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	if f, _ := segmentRange(t, dir); f != oldLast {
		t.Errorf("second truncation moved first segment to %d", f)
	}
}

func TestQuietWALRotatesAndTruncates(t *testing.T) {
	dir := t.TempDir()
	opts := Options{RotateAfter: 10 * time.Minute}
	w := openTest(t, dir, opts, nil)
	appendFloats(t, w.Storage, makeSeries(3, "m"), w.clock.Ms(), 1)
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	if f, l := segmentRange(t, dir); f != 0 || l != 0 {
		t.Fatalf("segments = %d-%d, want the young live segment only", f, l)
	}
	w.clock.Advance(11 * time.Minute)
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	if f, l := segmentRange(t, dir); f != 1 || l != 1 {
		t.Fatalf("segments = %d-%d, want 1-1 (rotated, old one deleted)", f, l)
	}
	// An empty live segment is not rotated.
	w.clock.Advance(11 * time.Minute)
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	if f, l := segmentRange(t, dir); f != 1 || l != 1 {
		t.Fatalf("segments = %d-%d after idle truncation, want 1-1", f, l)
	}
}

func TestSeriesGC(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SeriesGCAge: 10 * time.Minute}
	w := openTest(t, dir, opts, nil)
	idle := labels.FromStrings("__name__", "idle")
	busy := labels.FromStrings("__name__", "busy")
	held := labels.FromStrings("__name__", "held")

	oldRef := appendFloats(t, w.Storage, []labels.Labels{idle, busy}, w.clock.Ms(), 1)[0]

	// held is in an open batch across the GC: it must survive it.
	app := w.AppenderV2(t.Context())
	heldRef, err := app.Append(0, held, 0, w.clock.Ms(), 1, nil, nil, storage.AOptions{})
	if err != nil {
		t.Fatal(err)
	}

	w.clock.Advance(9 * time.Minute)
	appendFloats(t, w.Storage, []labels.Labels{busy}, w.clock.Ms(), 2)
	w.clock.Advance(2 * time.Minute)
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	if n := w.counter(t, "shoal_wal_series_gc_total"); n != 1 {
		t.Fatalf("series GC = %v, want 1 (idle only)", n)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if w.ActiveSeries() != 2 {
		t.Fatalf("active series = %d, want 2 (busy, held)", w.ActiveSeries())
	}

	// idle comes back under a new ref, with a new series record.
	newRef := appendFloats(t, w.Storage, []labels.Labels{idle}, w.clock.Ms(), 3)[0]
	if newRef == oldRef {
		t.Fatalf("forgotten series came back with its old ref %d", oldRef)
	}
	// A stale ref from a caller's cache resolves by labels to the new series.
	app = w.AppenderV2(t.Context())
	if r, err := app.Append(oldRef, idle, 0, w.clock.Ms()+1, 4, nil, nil, storage.AOptions{}); err != nil || r != newRef {
		t.Fatalf("append with forgotten ref: ref %d err %v, want ref %d", r, err, newRef)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c := readRecords(t, dir)
	recs := c.seriesByLabels()[idle.String()]
	if len(recs) != 2 || recs[0].Ref != chunks.HeadSeriesRef(oldRef) || recs[1].Ref != chunks.HeadSeriesRef(newRef) {
		t.Fatalf("series records for idle = %+v, want refs %d then %d", recs, oldRef, newRef)
	}
	var heldSeries int
	for _, s := range c.series {
		if s.Ref == chunks.HeadSeriesRef(heldRef) {
			heldSeries++
		}
	}
	if heldSeries != 1 {
		t.Fatalf("series records for held = %d, want 1", heldSeries)
	}

	// Replay with both refs for the same labels keeps the newer one.
	w2 := openTest(t, dir, opts, w.clock)
	if w2.ActiveSeries() != 3 {
		t.Errorf("active series after reopen = %d, want 3", w2.ActiveSeries())
	}
	if r := appendFloats(t, w2.Storage, []labels.Labels{idle}, w.clock.Ms()+2, 5)[0]; r != newRef {
		t.Errorf("after reopen idle has ref %d, want %d", r, newRef)
	}
}

func TestCheckpointCorruptionIsAnError(t *testing.T) {
	dir := t.TempDir()
	w := openTest(t, dir, smallOpts(), nil)
	fillUntil(t, w, makeSeries(50, "m"), time.Second, 3)
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	cp, _ := lastCheckpoint(t, dir)
	f := filepath.Join(cp, "00000000")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 200 && i < len(b); i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, last := segmentRange(t, dir)
	if _, err := Open(dir, smallOpts(), nil, nil); err == nil {
		t.Fatal("open with a corrupt checkpoint succeeded")
	}
	// Segments were not touched by a repair attempt.
	if _, l := segmentRange(t, dir); l < last {
		t.Errorf("segments deleted after a checkpoint error: last %d -> %d", last, l)
	}
}

// logLines collects log records at info level and above.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) handler() slog.Handler {
	return slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, string(p))
		return len(p), nil
	}), &slog.HandlerOptions{Level: slog.LevelInfo})
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// walBytes is what MaxSize bounds: segments from first on and the newest checkpoint.
func walBytes(t *testing.T, dir string) int64 {
	t.Helper()
	first, last := segmentRange(t, dir)
	var n int64
	for i := first; i <= last; i++ {
		fi, err := os.Stat(wlog.SegmentName(dir, i))
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	if cp, _, err := wlog.LastCheckpoint(dir); err == nil {
		n += dirBytes(cp)
	}
	return n
}

func TestMaxSizeDropsOldestUnsentSegments(t *testing.T) {
	dir := t.TempDir()
	opts := smallOpts()
	opts.MaxSize = 5 * int64(opts.SegmentSize)
	var pending atomic.Int64 // a reader stuck at segment 0 (the remote end is down)
	opts.PendingSegment = func() (int, bool) { return int(pending.Load()), true }
	var logs logLines
	clock := newFakeClock()
	reg := prometheus.NewRegistry()
	s, err := open(dir, opts, slog.New(logs.handler()), reg, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := &testWAL{Storage: s, reg: reg, clock: clock}
	series := makeSeries(50, "m")

	// Within the limit: nothing goes, however long the reader waits (MaxAge is far).
	fillUntil(t, w, series, time.Second, 3)
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	if first, _ := segmentRange(t, dir); first != 0 {
		t.Fatalf("a WAL within its max size lost segments 0-%d", first-1)
	}
	if n := w.counter(t, "shoal_wal_segments_dropped_unsent_total"); n != 0 {
		t.Fatalf("dropped unsent = %v within the limit", n)
	}

	// Over it: the oldest go, counted (segments and bytes), logged once.
	fillUntil(t, w, series, time.Second, 9)
	over := walBytes(t, dir)
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	first, last := segmentRange(t, dir)
	if first == 0 || walBytes(t, dir) > opts.MaxSize {
		t.Fatalf("after truncation segments %d-%d take %d bytes (before %d), want at most %d", first, last, walBytes(t, dir), over, opts.MaxSize)
	}
	if first < last-5 || first > last-3 {
		t.Fatalf("kept segments %d-%d: more went than the limit needs", first, last)
	}
	if n := w.counter(t, "shoal_wal_segments_dropped_unsent_total"); n != float64(first) {
		t.Fatalf("dropped unsent = %v, want %d", n, first)
	}
	if b := w.counter(t, "shoal_wal_bytes_dropped_unsent_total"); b < float64(first)*float64(opts.SegmentSize)/2 {
		t.Fatalf("bytes dropped unsent = %v for %d segments", b, first)
	}
	// The series the kept segments refer to are in the checkpoint.
	if _, idx := lastCheckpoint(t, dir); idx != first-1 {
		t.Fatalf("checkpoint %d, want %d", idx, first-1)
	}

	// The outage goes on: more goes, no new warning.
	fillUntil(t, w, series, time.Second, last+3)
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	first2, _ := segmentRange(t, dir)
	if first2 <= first {
		t.Fatal("the WAL kept growing past its max size")
	}
	if n := w.counter(t, "shoal_wal_segments_dropped_unsent_total"); n != float64(first2) {
		t.Fatalf("dropped unsent = %v, want %d", n, first2)
	}
	if n := logs.count("deleting WAL segments a reader has not sent"); n != 1 {
		t.Fatalf("%d warnings for one episode, want 1", n)
	}

	// The reader catches up: the episode ends; the next one warns again.
	_, live := segmentRange(t, dir)
	pending.Store(int64(live))
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	if n := logs.count("remote write caught up"); n != 1 {
		t.Fatalf("%d caught-up lines, want 1", n)
	}
	pending.Store(int64(live))
	fillUntil(t, w, series, time.Second, live+7)
	if err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	if n := logs.count("deleting WAL segments a reader has not sent"); n != 2 {
		t.Fatalf("%d warnings after a second episode, want 2", n)
	}
}

func TestMaxSizeValidation(t *testing.T) {
	for _, o := range []Options{
		{SegmentSize: 2 * pageSize, MaxSize: 3 * pageSize},
		{MaxSize: -1},
	} {
		if _, err := Open(t.TempDir(), o, nil, nil); err == nil || !strings.Contains(err.Error(), "max size") {
			t.Errorf("Open with %+v: err = %v, want a max size error", o, err)
		}
	}
}
