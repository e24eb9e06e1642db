package wal

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"
)

func TestReopenReplaysSeries(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	series := makeSeries(50, "up")

	w := openTest(t, dir, Options{}, clock)
	refs := appendFloats(t, w.Storage, series, clock.Ms(), 1)
	appendFloats(t, w.Storage, series, clock.Ms()+15000, 2)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	w = openTest(t, dir, Options{}, clock)
	if got := w.ActiveSeries(); got != len(series) {
		t.Fatalf("active series after replay = %d, want %d", got, len(series))
	}
	if d := w.counter(t, "shoal_wal_replay_duration_seconds"); d <= 0 {
		t.Errorf("replay duration = %v, want > 0", d)
	}
	// The same labels resolve to the same refs.
	again := appendFloats(t, w.Storage, series, clock.Ms()+30000, 3)
	if !slices.Equal(refs, again) {
		t.Fatalf("refs changed across reopen:\nbefore %v\nafter  %v", refs, again)
	}
	// The newest timestamp survived the restart: an older sample is out of order.
	app := w.AppenderV2(t.Context())
	if _, err := app.Append(0, series[0], 0, clock.Ms()+20000, 9, nil, nil, storage.AOptions{}); !errors.Is(err, storage.ErrOutOfOrderSample) {
		t.Fatalf("append older than replayed sample: err = %v, want ErrOutOfOrderSample", err)
	}
	// A new series gets a ref that collides with none of the old ones.
	fresh, err := app.Append(0, labels.FromStrings("__name__", "fresh"), 0, clock.Ms()+30000, 1, nil, nil, storage.AOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if max := slices.Max(refs); fresh <= max {
		t.Fatalf("new series ref %d does not lie above the replayed refs (max %d)", fresh, max)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// Every label set has exactly one ref in the WAL, and no ref two label sets.
	c := readRecords(t, dir)
	byRef := map[chunks.HeadSeriesRef]string{}
	for ls, rs := range c.seriesByLabels() {
		if len(rs) != 1 {
			t.Errorf("%s has %d series records, want 1", ls, len(rs))
		}
		for _, r := range rs {
			if o, ok := byRef[r.Ref]; ok {
				t.Errorf("ref %d used by %s and %s", r.Ref, o, ls)
			}
			byRef[r.Ref] = ls
		}
	}
	if len(c.samples) != 3*len(series)+1 {
		t.Errorf("WAL holds %d samples, want %d", len(c.samples), 3*len(series)+1)
	}
}

func TestRecordsHoldWhatWasAppended(t *testing.T) {
	dir := t.TempDir()
	var commits int
	w := openTest(t, dir, Options{OnCommit: func() { commits++ }}, nil)
	ts := w.clock.Ms()

	floatLS := labels.FromStrings("__name__", "requests_total", "code", "200")
	staleLS := labels.FromStrings("__name__", "gone")
	histLS := labels.FromStrings("__name__", "latency")
	fhistLS := labels.FromStrings("__name__", "latency_float")
	nhcbLS := labels.FromStrings("__name__", "latency_nhcb")
	h := &histogram.Histogram{
		Count: 5, Sum: 12.5, Schema: 1, ZeroThreshold: 0.001, ZeroCount: 1,
		PositiveSpans:   []histogram.Span{{Offset: 0, Length: 2}},
		PositiveBuckets: []int64{1, 2}, // absolute 1, 3
	}
	fh := &histogram.FloatHistogram{
		Count: 4.5, Sum: 3.25, Schema: 0,
		PositiveSpans:   []histogram.Span{{Offset: 1, Length: 1}},
		PositiveBuckets: []float64{4.5},
	}
	nhcb := &histogram.Histogram{
		Count: 3, Sum: 2, Schema: histogram.CustomBucketsSchema,
		PositiveSpans:   []histogram.Span{{Offset: 0, Length: 2}},
		PositiveBuckets: []int64{1, 1},
		CustomValues:    []float64{0.5, 1},
	}
	meta := metadata.Metadata{Type: model.MetricTypeCounter, Unit: "requests", Help: "Requests served."}
	ex := exemplar.Exemplar{Labels: labels.FromStrings("trace_id", "abc123"), Value: 1, Ts: ts - 5, HasTs: true}

	app := w.AppenderV2(t.Context())
	mustAppend := func(ls labels.Labels, t0 int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, o storage.AOptions) storage.SeriesRef {
		t.Helper()
		ref, err := app.Append(0, ls, 0, t0, v, h, fh, o)
		if err != nil {
			t.Fatalf("append %s: %v", ls, err)
		}
		return ref
	}
	floatRef := mustAppend(floatLS, ts, 42, nil, nil, storage.AOptions{Metadata: meta, Exemplars: []exemplar.Exemplar{ex}})
	staleRef := mustAppend(staleLS, ts, math.Float64frombits(value.StaleNaN), nil, nil, storage.AOptions{Metadata: meta})
	histRef := mustAppend(histLS, ts, 0, h, nil, storage.AOptions{})
	fhistRef := mustAppend(fhistLS, ts, 0, nil, fh, storage.AOptions{})
	nhcbRef := mustAppend(nhcbLS, ts, 0, nhcb, nil, storage.AOptions{})
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}

	// Same metadata again: no new metadata record; changed help: one more.
	app = w.AppenderV2(t.Context())
	mustAppend(floatLS, ts+1000, 43, nil, nil, storage.AOptions{Metadata: meta})
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	meta2 := meta
	meta2.Help = "Requests served, now with a better help text."
	app = w.AppenderV2(t.Context())
	mustAppend(floatLS, ts+2000, 44, nil, nil, storage.AOptions{Metadata: meta2})
	// A separate exemplar call for a series that exists.
	ex2 := exemplar.Exemplar{Labels: labels.FromStrings("trace_id", "def456"), Value: 44, Ts: ts + 2000, HasTs: true}
	ea := app.(storage.ExemplarAppenderV2)
	if _, err := ea.AppendExemplars(floatRef, floatLS, []exemplar.Exemplar{ex2, ex2}); err != nil {
		t.Fatal(err)
	}
	if _, err := ea.AppendExemplars(0, labels.FromStrings("__name__", "never_seen"), []exemplar.Exemplar{ex2}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("exemplar for unknown series: err = %v, want ErrNotFound", err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if commits != 3 {
		t.Errorf("OnCommit called %d times, want 3", commits)
	}
	if n := w.counter(t, "shoal_wal_samples_appended_total", "type", "float"); n != 4 {
		t.Errorf("float samples appended = %v, want 4", n)
	}
	if n := w.counter(t, "shoal_wal_samples_appended_total", "type", "histogram"); n != 3 {
		t.Errorf("histogram samples appended = %v, want 3", n)
	}
	if n := w.counter(t, "shoal_wal_samples_appended_total", "type", "exemplar"); n != 2 {
		t.Errorf("exemplars appended = %v, want 2", n)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	c := readRecords(t, dir)
	if c.types[0] != record.Series {
		t.Fatalf("first record is %v, want series", c.types[0])
	}
	wantSeries := map[string]storage.SeriesRef{
		floatLS.String(): floatRef, staleLS.String(): staleRef, histLS.String(): histRef,
		fhistLS.String(): fhistRef, nhcbLS.String(): nhcbRef,
	}
	if len(c.series) != len(wantSeries) {
		t.Fatalf("got %d series records, want %d", len(c.series), len(wantSeries))
	}
	for _, s := range c.series {
		if want, ok := wantSeries[s.Labels.String()]; !ok || storage.SeriesRef(s.Ref) != want {
			t.Errorf("series record %s ref %d, want ref %d", s.Labels, s.Ref, want)
		}
	}

	type fs struct {
		ref chunks.HeadSeriesRef
		t   int64
		v   uint64
	}
	var gotFloats []fs
	for _, s := range c.samples {
		gotFloats = append(gotFloats, fs{s.Ref, s.T, math.Float64bits(s.V)})
	}
	wantFloats := []fs{
		{chunks.HeadSeriesRef(floatRef), ts, math.Float64bits(42)},
		{chunks.HeadSeriesRef(staleRef), ts, value.StaleNaN},
		{chunks.HeadSeriesRef(floatRef), ts + 1000, math.Float64bits(43)},
		{chunks.HeadSeriesRef(floatRef), ts + 2000, math.Float64bits(44)},
	}
	if !slices.Equal(gotFloats, wantFloats) {
		t.Errorf("float samples:\n got %v\nwant %v", gotFloats, wantFloats)
	}

	if len(c.hists) != 2 {
		t.Fatalf("got %d histogram samples, want 2", len(c.hists))
	}
	for _, got := range c.hists {
		want := h
		if got.Ref == chunks.HeadSeriesRef(nhcbRef) {
			want = nhcb
		} else if got.Ref != chunks.HeadSeriesRef(histRef) {
			t.Fatalf("histogram sample for unexpected ref %d", got.Ref)
		}
		if got.T != ts || !got.H.Equals(want) {
			t.Errorf("histogram ref %d: got %v@%d, want %v@%d", got.Ref, got.H, got.T, want, ts)
		}
	}
	if len(c.fhists) != 1 || c.fhists[0].Ref != chunks.HeadSeriesRef(fhistRef) || c.fhists[0].T != ts || !c.fhists[0].FH.Equals(fh) {
		t.Errorf("float histograms = %+v, want one %v for ref %d", c.fhists, fh, fhistRef)
	}

	if len(c.exemplars) != 2 {
		t.Fatalf("got %d exemplars, want 2 (the repeated one dropped): %+v", len(c.exemplars), c.exemplars)
	}
	for i, want := range []exemplar.Exemplar{ex, ex2} {
		got := c.exemplars[i]
		if got.Ref != chunks.HeadSeriesRef(floatRef) || got.T != want.Ts || got.V != want.Value || !labels.Equal(got.Labels, want.Labels) {
			t.Errorf("exemplar %d = %+v, want %+v on ref %d", i, got, want, floatRef)
		}
	}

	// Metadata: once for each series that had it (not for the staleness
	// marker), and again when the help changed.
	var gotMeta []string
	for _, m := range c.metas {
		gotMeta = append(gotMeta, string(record.ToMetricType(m.Type))+"|"+m.Unit+"|"+m.Help+"|"+labelsOf(c, m.Ref))
	}
	wantMeta := []string{
		"counter|requests|Requests served.|" + floatLS.String(),
		"counter|requests|" + meta2.Help + "|" + floatLS.String(),
	}
	if !slices.Equal(gotMeta, wantMeta) {
		t.Errorf("metadata:\n got %q\nwant %q", gotMeta, wantMeta)
	}

}

func labelsOf(c *walContent, ref chunks.HeadSeriesRef) string {
	for _, s := range c.series {
		if s.Ref == ref {
			return s.Labels.String()
		}
	}
	return "?"
}

func TestOutOfOrderAndDuplicates(t *testing.T) {
	w := openTest(t, t.TempDir(), Options{MaxAge: time.Hour}, nil)
	ls := labels.FromStrings("__name__", "x")
	ts := w.clock.Ms()
	appendFloats(t, w.Storage, []labels.Labels{ls}, ts, 1)

	app := w.AppenderV2(t.Context())
	if _, err := app.Append(0, ls, 0, ts-1, 1, nil, nil, storage.AOptions{}); !errors.Is(err, storage.ErrOutOfOrderSample) {
		t.Errorf("older sample: err = %v, want ErrOutOfOrderSample", err)
	}
	if _, err := app.Append(0, ls, 0, ts, 2, nil, nil, storage.AOptions{}); !errors.Is(err, storage.ErrDuplicateSampleForTimestamp) {
		t.Errorf("same timestamp, other value: err = %v, want ErrDuplicateSampleForTimestamp", err)
	}
	if _, err := app.Append(0, ls, 0, ts, 1, nil, nil, storage.AOptions{}); err != nil {
		t.Errorf("same sample again: err = %v, want nil (nothing written)", err)
	}
	if _, err := app.Append(0, labels.FromStrings("__name__", "y"), 0, ts-2*time.Hour.Milliseconds(), 1, nil, nil, storage.AOptions{}); !errors.Is(err, storage.ErrOutOfBounds) {
		t.Errorf("sample older than max age: err = %v, want ErrOutOfBounds", err)
	}
	if _, err := app.Append(0, labels.EmptyLabels(), 0, ts, 1, nil, nil, storage.AOptions{}); err == nil {
		t.Error("empty label set accepted")
	}
	if _, err := app.Append(0, labels.New(labels.Label{Name: "a", Value: "1"}, labels.Label{Name: "a", Value: "2"}), 0, ts, 1, nil, nil, storage.AOptions{}); err == nil {
		t.Error("duplicate label names accepted")
	}
	bad := &histogram.Histogram{Count: 1, Schema: 0, PositiveSpans: []histogram.Span{{Length: 2}}, PositiveBuckets: []int64{1}}
	if _, err := app.Append(0, ls, 0, ts+1, 0, bad, nil, storage.AOptions{}); err == nil {
		t.Error("invalid histogram accepted")
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := w.counter(t, "shoal_wal_out_of_order_samples_total"); n != 1 {
		t.Errorf("out of order counter = %v, want 1", n)
	}
	for reason, want := range map[string]float64{"duplicate": 1, "too_old": 1, "invalid": 3} {
		if n := w.counter(t, "shoal_wal_rejected_samples_total", "reason", reason); n != want {
			t.Errorf("rejected{%s} = %v, want %v", reason, n, want)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if c := readRecords(t, w.Dir()); len(c.samples) != 1 {
		t.Errorf("WAL holds %d samples, want only the first one", len(c.samples))
	}
}

func TestRollbackWritesNothingAndSeriesComeLater(t *testing.T) {
	w := openTest(t, t.TempDir(), Options{}, nil)
	ls := labels.FromStrings("__name__", "x")
	ts := w.clock.Ms()
	app := w.AppenderV2(t.Context())
	ref, err := app.Append(0, ls, 0, ts, 1, nil, nil, storage.AOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Rollback(); err != nil {
		t.Fatal(err)
	}
	app = w.AppenderV2(t.Context())
	ref2, err := app.Append(ref, ls, 0, ts, 2, nil, nil, storage.AOptions{})
	if err != nil {
		t.Fatalf("append after rollback at the same timestamp: %v", err)
	}
	if ref2 != ref {
		t.Fatalf("ref changed after rollback: %d -> %d", ref, ref2)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c := readRecords(t, w.Dir())
	if len(c.series) != 1 || len(c.samples) != 1 || c.samples[0].V != 2 || c.types[0] != record.Series {
		t.Fatalf("after rollback+commit WAL has types %v series %v samples %v; want one series record then one sample of 2", c.types, c.series, c.samples)
	}
}

func TestClosedStorage(t *testing.T) {
	w := openTest(t, t.TempDir(), Options{}, nil)
	app := w.AppenderV2(t.Context())
	if _, err := app.Append(0, labels.FromStrings("__name__", "x"), 0, w.clock.Ms(), 1, nil, nil, storage.AOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); !errors.Is(err, ErrClosed) {
		t.Errorf("commit after close: err = %v, want ErrClosed", err)
	}
	if err := w.Truncate(); !errors.Is(err, ErrClosed) {
		t.Errorf("truncate after close: err = %v, want ErrClosed", err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second close: err = %v, want ErrClosed", err)
	}
}

func TestOptionsValidation(t *testing.T) {
	if _, err := Open(t.TempDir(), Options{SegmentSize: 1000}, nil, nil); err == nil {
		t.Error("segment size not a multiple of 32KiB accepted")
	}
	if _, err := Open(t.TempDir(), Options{Compression: "lz4"}, nil, nil); err == nil {
		t.Error("unknown compression accepted")
	}
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if d := DefaultOptions(); o.SegmentSize != d.SegmentSize || o.Compression != d.Compression ||
		o.TruncateInterval != d.TruncateInterval || o.MaxAge != d.MaxAge || o.SeriesGCAge != d.SeriesGCAge || o.RotateAfter != d.RotateAfter {
		t.Errorf("zero Options = %+v, want DefaultOptions %+v", o, DefaultOptions())
	}
}

func TestMetricsRegistered(t *testing.T) {
	w := openTest(t, t.TempDir(), Options{}, nil)
	appendFloats(t, w.Storage, makeSeries(3, "m"), w.clock.Ms(), 1)
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range []string{
		"shoal_wal_segments", "shoal_wal_bytes", "shoal_wal_series", "shoal_wal_segment_current",
		"shoal_wal_replay_duration_seconds", "shoal_wal_corruptions_repaired_total",
		"shoal_wal_samples_appended_total", "shoal_wal_out_of_order_samples_total",
		"shoal_wal_rejected_samples_total", "shoal_wal_commits_total", "shoal_wal_write_failures_total",
		"shoal_wal_truncations_total", "shoal_wal_truncation_failures_total",
		"shoal_wal_checkpoint_failures_total", "shoal_wal_segments_dropped_unsent_total",
		"shoal_wal_series_created_total", "shoal_wal_series_gc_total",
	} {
		if !have[name] {
			t.Errorf("metric %s not registered", name)
		}
	}
	if n := w.counter(t, "shoal_wal_series"); n != 3 {
		t.Errorf("shoal_wal_series = %v, want 3", n)
	}
	if n := w.counter(t, "shoal_wal_segments"); n != 1 {
		t.Errorf("shoal_wal_segments = %v, want 1", n)
	}
	if n := w.counter(t, "shoal_wal_bytes"); n <= 0 {
		t.Errorf("shoal_wal_bytes = %v, want > 0", n)
	}
	// A second Storage on the same registry is refused, not a panic.
	if _, err := open(t.TempDir(), Options{}, nil, w.reg, time.Now); err == nil {
		t.Error("second Storage on one registry: no error")
	}
	// Close unregisters, so the registry can be reused.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := open(t.TempDir(), Options{}, nil, w.reg, time.Now)
	if err != nil {
		t.Fatalf("reopen on the same registry after close: %v", err)
	}
	s2.Close()
}
