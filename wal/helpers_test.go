package wal

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/record"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/prometheus/prometheus/util/compression"
)

// fakeClock is a settable wall clock shared by a test and its Storage.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Ms() int64 { return c.Now().UnixMilli() }

type testWAL struct {
	*Storage
	reg   *prometheus.Registry
	clock *fakeClock
}

// openTest opens a Storage on dir with its own registry and the given clock
// (a new one if nil). It is closed at the end of the test unless the test
// closed it already.
func openTest(t testing.TB, dir string, opts Options, clock *fakeClock) *testWAL {
	t.Helper()
	if clock == nil {
		clock = newFakeClock()
	}
	reg := prometheus.NewRegistry()
	s, err := open(dir, opts, nil, reg, clock.Now)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return &testWAL{Storage: s, reg: reg, clock: clock}
}

func (w *testWAL) counter(t testing.TB, name string, lvs ...string) float64 {
	t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(lvs); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == lvs[i] && lp.GetValue() == lvs[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("metric %s%v not found", name, lvs)
	return 0
}

// walContent is every record decoded from a directory, in log order.
type walContent struct {
	types     []record.Type
	series    []record.RefSeries
	samples   []record.RefSample
	hists     []record.RefHistogramSample
	fhists    []record.RefFloatHistogramSample
	exemplars []record.RefExemplar
	metas     []record.RefMetadata
}

func (c *walContent) seriesByLabels() map[string][]record.RefSeries {
	m := map[string][]record.RefSeries{}
	for _, s := range c.series {
		m[s.Labels.String()] = append(m[s.Labels.String()], s)
	}
	return m
}

// readRecords decodes all segments in dir (a WAL or a checkpoint directory).
func readRecords(t testing.TB, dir string) *walContent {
	t.Helper()
	sr, err := wlog.NewSegmentsReader(dir)
	if err != nil {
		t.Fatalf("open segments in %s: %v", dir, err)
	}
	defer sr.Close()
	return decodeAll(t, sr)
}

func decodeAll(t testing.TB, r io.Reader) *walContent {
	t.Helper()
	c := &walContent{}
	dec := record.NewDecoder(labels.NewSymbolTable(), nil)
	rd := wlog.NewReader(r)
	for rd.Next() {
		c.add(t, &dec, rd.Record())
	}
	if err := rd.Err(); err != nil {
		t.Fatalf("read records: %v", err)
	}
	return c
}

// add decodes one record into c.
func (c *walContent) add(t testing.TB, dec *record.Decoder, rec []byte) {
	t.Helper()
	typ := dec.Type(rec)
	c.types = append(c.types, typ)
	var err error
	switch typ {
	case record.Series:
		var v []record.RefSeries
		v, err = dec.Series(rec, nil)
		c.series = append(c.series, v...)
	case record.Samples, record.SamplesV2:
		var v []record.RefSample
		v, err = dec.Samples(rec, nil)
		c.samples = append(c.samples, v...)
	case record.HistogramSamples, record.HistogramSamplesV2, record.CustomBucketsHistogramSamples:
		var v []record.RefHistogramSample
		v, err = dec.HistogramSamples(rec, nil)
		c.hists = append(c.hists, v...)
	case record.FloatHistogramSamples, record.FloatHistogramSamplesV2, record.CustomBucketsFloatHistogramSamples:
		var v []record.RefFloatHistogramSample
		v, err = dec.FloatHistogramSamples(rec, nil)
		c.fhists = append(c.fhists, v...)
	case record.Exemplars:
		var v []record.RefExemplar
		v, err = dec.Exemplars(rec, nil)
		c.exemplars = append(c.exemplars, v...)
	case record.Metadata:
		var v []record.RefMetadata
		v, err = dec.Metadata(rec, nil)
		c.metas = append(c.metas, v...)
	default:
		t.Fatalf("unexpected record type %v", typ)
	}
	if err != nil {
		t.Fatalf("decode %v: %v", typ, err)
	}
}

// appendFloats appends one float sample per series at ts and commits.
func appendFloats(t testing.TB, s *Storage, series []labels.Labels, ts int64, v float64) []storage.SeriesRef {
	t.Helper()
	app := s.AppenderV2(t.Context())
	refs := make([]storage.SeriesRef, len(series))
	for i, ls := range series {
		ref, err := app.Append(0, ls, 0, ts, v, nil, nil, storage.AOptions{})
		if err != nil {
			t.Fatalf("append %s@%d: %v", ls, ts, err)
		}
		refs[i] = ref
	}
	if err := app.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return refs
}

func makeSeries(n int, name string) []labels.Labels {
	out := make([]labels.Labels, n)
	for i := range out {
		out[i] = labels.FromStrings("__name__", name, "instance", fmt.Sprintf("host-%04d:9100", i), "job", "node")
	}
	return out
}

func segmentRange(t testing.TB, dir string) (first, last int) {
	t.Helper()
	first, last, err := wlog.Segments(dir)
	if err != nil {
		t.Fatal(err)
	}
	return first, last
}

// smallOpts forces frequent rotation and keeps records uncompressed so that
// sizes are predictable.
func smallOpts() Options {
	return Options{SegmentSize: 2 * pageSize, Compression: compression.None}
}
