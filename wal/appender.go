package wal

import (
	"errors"
	"fmt"
	"math"
	"os"
	"time"
	"unicode/utf8"
	"unique"
	"unsafe"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"
	"github.com/prometheus/prometheus/tsdb/wlog"
)

// appender collects one batch. Every series it refers to is pinned
// (memSeries.pending) from Append until Commit or Rollback.
type appender struct {
	s    *Storage
	minT int64 // samples older than this are refused (MaxAge)

	samples      []record.RefSample
	sampleSeries []*memSeries
	hists        []record.RefHistogramSample
	histSeries   []*memSeries
	fhists       []record.RefFloatHistogramSample
	fhistSeries  []*memSeries
	exemplars    []record.RefExemplar
	exSeries     []*memSeries // pinned by AppendExemplars alone
	metas        []record.RefMetadata
	metaSeries   []*memSeries
	metaHandles  []unique.Handle[metadata.Metadata]

	// metaIn and metaH remember the last metadata passed to Append and its
	// interned handle: a scrape passes the same strings for every series of
	// a family, so comparing the strings' addresses replaces a byte-wise
	// comparison (and a hash) per sample. metaIn keeps those strings alive
	// until release, so an equal address always means equal bytes.
	metaIn metadata.Metadata
	metaH  unique.Handle[metadata.Metadata]

	// Reused between batches.
	newSeries    []record.RefSeries
	newSeriesPtr []*memSeries
	recs         [][]byte
	bufs         [8][]byte
	logDone      chan error // the writer's answer to this appender's commit
}

var _ storage.ExemplarAppenderV2 = (*appender)(nil)

// Append adds one sample (float, histogram or float histogram) with its
// exemplars and metadata to the batch. See storage.AppenderV2.
func (a *appender) Append(ref storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AOptions) (storage.SeriesRef, error) {
	s := a.s
	var stale bool
	switch {
	case fh != nil:
		if err := fh.Validate(); err != nil {
			s.metrics.rejected.WithLabelValues(rejectInvalid).Inc()
			return 0, err
		}
		stale = value.IsStaleNaN(fh.Sum)
	case h != nil:
		if err := h.Validate(); err != nil {
			s.metrics.rejected.WithLabelValues(rejectInvalid).Inc()
			return 0, err
		}
		stale = value.IsStaleNaN(h.Sum)
	default:
		stale = value.IsStaleNaN(v)
	}
	if t < a.minT {
		s.metrics.rejected.WithLabelValues(rejectTooOld).Inc()
		return 0, storage.ErrOutOfBounds
	}

	// The scrape loop caches refs, so the series is nearly always found by
	// ref: pin it and check the sample under one lock.
	var ms *memSeries
	if ref != 0 {
		if ms = s.series.getByRef(chunks.HeadSeriesRef(ref)); ms != nil {
			ms.mu.Lock()
			if ms.dead {
				ms.mu.Unlock()
				ms = nil
			} else {
				ms.pending++
			}
		}
	}
	if ms == nil {
		var err error
		if ms, err = a.getOrCreate(0, ls); err != nil {
			s.metrics.rejected.WithLabelValues(rejectInvalid).Inc()
			return 0, err
		}
		ms.mu.Lock()
	}
	// ms is pinned and locked.
	if t <= ms.lastTs {
		same := t == ms.lastTs
		repeat := same && h == nil && fh == nil && ms.lastFloat && math.Float64bits(v) == ms.lastV
		ms.pending--
		ms.mu.Unlock()
		switch {
		case repeat:
			// Same sample again (e.g. an exported timestamp that did not
			// move): nothing to write, like the TSDB head.
			return storage.SeriesRef(ms.ref), nil
		case same:
			s.metrics.rejected.WithLabelValues(rejectDuplicate).Inc()
			return 0, storage.ErrDuplicateSampleForTimestamp
		default:
			s.metrics.outOfOrder.Inc()
			return 0, storage.ErrOutOfOrderSample
		}
	}
	var meta unique.Handle[metadata.Metadata]
	if !stale && !opts.Metadata.IsEmpty() {
		meta = a.intern(opts.Metadata, ms.meta)
	}
	metaChanged := meta != (unique.Handle[metadata.Metadata]{}) && ms.meta != meta
	ms.mu.Unlock()

	switch {
	case fh != nil:
		a.fhists = append(a.fhists, record.RefFloatHistogramSample{Ref: ms.ref, ST: st, T: t, FH: fh})
		a.fhistSeries = append(a.fhistSeries, ms)
	case h != nil:
		a.hists = append(a.hists, record.RefHistogramSample{Ref: ms.ref, ST: st, T: t, H: h})
		a.histSeries = append(a.histSeries, ms)
	default:
		a.samples = append(a.samples, record.RefSample{Ref: ms.ref, ST: st, T: t, V: v})
		a.sampleSeries = append(a.sampleSeries, ms)
	}
	if stale {
		// A staleness marker carries no exemplars or metadata.
		return storage.SeriesRef(ms.ref), nil
	}
	if metaChanged {
		a.metaHandles = append(a.metaHandles, meta)
		a.metas = append(a.metas, record.RefMetadata{
			Ref:  ms.ref,
			Type: record.GetMetricType(opts.Metadata.Type),
			Unit: opts.Metadata.Unit,
			Help: opts.Metadata.Help,
		})
		a.metaSeries = append(a.metaSeries, ms)
	}
	if len(opts.Exemplars) > 0 {
		// The sample is in; a bad exemplar is reported as a partial error.
		return storage.SeriesRef(ms.ref), a.addExemplars(ms, opts.Exemplars)
	}
	return storage.SeriesRef(ms.ref), nil
}

// intern returns the interned handle of m: the last one when m has the very
// same strings (the next series of the same family), else the series' own
// (was) when it holds the same metadata, as it does from one scrape to the
// next; unique.Make, which hashes the strings, only for what changed.
func (a *appender) intern(m metadata.Metadata, was unique.Handle[metadata.Metadata]) unique.Handle[metadata.Metadata] {
	switch {
	case a.metaH != (unique.Handle[metadata.Metadata]{}) && sameStrings(m, a.metaIn):
	case was != (unique.Handle[metadata.Metadata]{}) && was.Value() == m:
		a.metaIn, a.metaH = m, was
	default:
		a.metaIn, a.metaH = m, unique.Make(m)
	}
	return a.metaH
}

// sameStrings reports whether a and b are made of the same strings in
// memory (same address and length), which implies equal values.
func sameStrings(a, b metadata.Metadata) bool {
	same := func(x, y string) bool {
		return len(x) == len(y) && unsafe.StringData(x) == unsafe.StringData(y)
	}
	return a.Type == b.Type && same(a.Unit, b.Unit) && same(a.Help, b.Help)
}

// AppendExemplars adds exemplars for a series that already exists (appended
// in this batch or an earlier one). See storage.ExemplarAppenderV2.
func (a *appender) AppendExemplars(ref storage.SeriesRef, ls labels.Labels, exemplars []exemplar.Exemplar) (storage.SeriesRef, error) {
	ms := a.lookup(chunks.HeadSeriesRef(ref), ls)
	if ms == nil {
		return 0, fmt.Errorf("wal: exemplars for unknown series %s: %w", ls.String(), storage.ErrNotFound)
	}
	n := len(a.exemplars)
	err := a.addExemplars(ms, exemplars)
	if len(a.exemplars) > n {
		a.exSeries = append(a.exSeries, ms) // keeps the pin until commit
	} else {
		ms.unpin()
	}
	return storage.SeriesRef(ms.ref), err
}

func (a *appender) addExemplars(ms *memSeries, exemplars []exemplar.Exemplar) error {
	var errs []storage.ExemplarError
	for i, e := range exemplars {
		e.Labels = e.Labels.WithoutEmpty()
		if err := validateExemplar(e); err != nil {
			errs = append(errs, storage.ExemplarError{Index: i, Err: err})
			continue
		}
		ms.mu.Lock()
		dup := ms.lastExemplar != nil && ms.lastExemplar.Equals(e)
		if !dup {
			ms.lastExemplar = &e
		}
		ms.mu.Unlock()
		if dup {
			continue // duplicates are ignored, as the contract asks
		}
		a.exemplars = append(a.exemplars, record.RefExemplar{Ref: ms.ref, T: e.Ts, V: e.Value, Labels: e.Labels})
	}
	if len(errs) > 0 {
		return &storage.AppendPartialError{ExemplarErrors: errs}
	}
	return nil
}

func validateExemplar(e exemplar.Exemplar) error {
	if name, dup := e.Labels.HasDuplicateLabelNames(); dup {
		return fmt.Errorf("exemplar label name %q is not unique", name)
	}
	n := 0
	return e.Labels.Validate(func(l labels.Label) error {
		n += utf8.RuneCountInString(l.Name) + utf8.RuneCountInString(l.Value)
		if n > exemplar.ExemplarMaxLabelSetLength {
			return storage.ErrExemplarLabelLength
		}
		return nil
	})
}

// pin marks ms as used by an uncommitted batch, unless GC has already
// forgotten it.
func (ms *memSeries) pin() bool {
	ms.mu.Lock()
	ok := !ms.dead
	if ok {
		ms.pending++
	}
	ms.mu.Unlock()
	return ok
}

func (ms *memSeries) unpin() {
	ms.mu.Lock()
	ms.pending--
	ms.mu.Unlock()
}

// lookup finds and pins an existing live series, or returns nil.
func (a *appender) lookup(ref chunks.HeadSeriesRef, ls labels.Labels) *memSeries {
	if ref != 0 {
		if ms := a.s.series.getByRef(ref); ms != nil && ms.pin() {
			return ms
		}
	}
	ls = ls.WithoutEmpty()
	hash := ls.Hash()
	for {
		ms := a.s.series.getByLabels(hash, ls)
		if ms == nil {
			return nil
		}
		if ms.pin() {
			return ms
		}
	}
}

// getOrCreate finds and pins the series, creating it on first sight.
func (a *appender) getOrCreate(ref chunks.HeadSeriesRef, ls labels.Labels) (*memSeries, error) {
	s := a.s
	if ref != 0 {
		if ms := s.series.getByRef(ref); ms != nil && ms.pin() {
			return ms, nil
		}
	}
	ls = ls.WithoutEmpty()
	if ls.IsEmpty() {
		return nil, errors.New("wal: empty label set")
	}
	hash := ls.Hash()
	for {
		if ms := s.series.getByLabels(hash, ls); ms != nil {
			if ms.pin() {
				return ms, nil
			}
			continue // forgotten meanwhile: look again, then create
		}
		if name, dup := ls.HasDuplicateLabelNames(); dup {
			return nil, fmt.Errorf("wal: label name %q is not unique in %s", name, ls.String())
		}
		ms := newMemSeries(chunks.HeadSeriesRef(s.nextRef.Add(1)), ls, hash, s.now().UnixMilli())
		ms.pending = 1
		got, created := s.series.getOrSet(ms)
		if created {
			s.numSeries.Add(1)
			s.metrics.seriesCreated.Inc()
			return ms, nil
		}
		// Another appender created it first; its ref is wasted, which is fine.
		if got.pin() {
			return got, nil
		}
	}
}

// Commit writes the batch to the WAL: series records for series not yet in
// the WAL first, then metadata, samples, histograms, float histograms and
// exemplars, in one wlog.Log call. The records have reached the operating
// system when Commit returns.
func (a *appender) Commit() error {
	defer a.release()
	if a.empty() {
		return nil
	}
	s := a.s
	enc := record.Encoder{EnableSTStorage: s.opts.StoreStartTimestamps}

	// Encode outside the lock; slot 0 is for the series record. Metadata
	// comes next, before the data: a reader (a remote-write queue) then knows
	// a series' type, help and unit before its first sample, and can send
	// them with it.
	recs := append(a.recs[:0], nil)
	if len(a.metas) > 0 {
		a.bufs[7] = enc.Metadata(a.metas, a.bufs[7][:0])
		recs = append(recs, a.bufs[7])
	}
	maxT := int64(math.MinInt64)
	if len(a.samples) > 0 {
		a.bufs[1] = enc.Samples(a.samples, a.bufs[1][:0])
		recs = append(recs, a.bufs[1])
		for _, x := range a.samples {
			maxT = max(maxT, x.T)
		}
	}
	if len(a.hists) > 0 {
		var custom []record.RefHistogramSample
		a.bufs[2], custom = enc.HistogramSamples(a.hists, a.bufs[2][:0])
		if len(a.bufs[2]) > 0 {
			recs = append(recs, a.bufs[2])
		}
		if len(custom) > 0 {
			a.bufs[3] = enc.CustomBucketsHistogramSamples(custom, a.bufs[3][:0])
			recs = append(recs, a.bufs[3])
		}
		for _, x := range a.hists {
			maxT = max(maxT, x.T)
		}
	}
	if len(a.fhists) > 0 {
		var custom []record.RefFloatHistogramSample
		a.bufs[4], custom = enc.FloatHistogramSamples(a.fhists, a.bufs[4][:0])
		if len(a.bufs[4]) > 0 {
			recs = append(recs, a.bufs[4])
		}
		if len(custom) > 0 {
			a.bufs[5] = enc.CustomBucketsFloatHistogramSamples(custom, a.bufs[5][:0])
			recs = append(recs, a.bufs[5])
		}
		for _, x := range a.fhists {
			maxT = max(maxT, x.T)
		}
	}
	if len(a.exemplars) > 0 {
		a.bufs[6] = enc.Exemplars(a.exemplars, a.bufs[6][:0])
		recs = append(recs, a.bufs[6])
	}
	a.recs = recs

	if s.unwritable.Load() {
		s.tryReopen()
	}
	s.commitMu.Lock()
	if s.closed {
		s.commitMu.Unlock()
		a.unpinAll()
		return ErrClosed
	}
	if s.writeErr != nil {
		err := s.refuseLocked(len(a.samples) + len(a.hists) + len(a.fhists))
		s.commitMu.Unlock()
		a.unpinAll()
		return err
	}
	a.newSeries, a.newSeriesPtr = a.newSeries[:0], a.newSeriesPtr[:0]
	for _, list := range [][]*memSeries{a.sampleSeries, a.histSeries, a.fhistSeries, a.exSeries} {
		for _, ms := range list {
			if !ms.logged {
				ms.logged = true
				a.newSeries = append(a.newSeries, record.RefSeries{Ref: ms.ref, Labels: ms.lset})
				a.newSeriesPtr = append(a.newSeriesPtr, ms)
			}
		}
	}
	if len(a.newSeries) > 0 {
		a.bufs[0] = enc.Series(a.newSeries, a.bufs[0][:0])
		recs[0] = a.bufs[0]
	} else {
		recs = recs[1:]
	}
	if a.logDone == nil {
		a.logDone = make(chan error, 1)
	}
	if err := s.logLocked(recs, a.logDone); err != nil {
		for _, ms := range a.newSeriesPtr {
			ms.logged = false
		}
		s.writeFailedLocked(err, len(a.samples)+len(a.hists)+len(a.fhists))
		s.commitMu.Unlock()
		a.unpinAll()
		s.metrics.writeFailures.Inc()
		return fmt.Errorf("wal: write: %w", err)
	}
	now := s.now()
	s.noteWriteLocked(recs, min(maxT, now.UnixMilli()), now)
	for _, ms := range a.newSeriesPtr {
		if uint64(ms.ref) > s.maxLoggedRef.Load() {
			s.maxLoggedRef.Store(uint64(ms.ref))
		}
	}
	s.commitMu.Unlock()

	nowMs := now.UnixMilli()
	for i, x := range a.samples {
		a.sampleSeries[i].committed(x.T, math.Float64bits(x.V), true, nowMs)
	}
	for i, x := range a.hists {
		a.histSeries[i].committed(x.T, 0, false, nowMs)
	}
	for i, x := range a.fhists {
		a.fhistSeries[i].committed(x.T, 0, false, nowMs)
	}
	for _, ms := range a.exSeries {
		ms.unpin()
	}
	for i, ms := range a.metaSeries {
		ms.mu.Lock()
		ms.meta = a.metaHandles[i]
		ms.mu.Unlock()
	}

	s.metrics.commits.Inc()
	s.metrics.appendedFloat.Add(float64(len(a.samples)))
	s.metrics.appendedHistogram.Add(float64(len(a.hists) + len(a.fhists)))
	s.metrics.appendedExemplar.Add(float64(len(a.exemplars)))
	if s.opts.OnCommit != nil {
		s.opts.OnCommit()
	}
	return nil
}

// committed applies a written sample to the series and drops its pin.
func (ms *memSeries) committed(t int64, v uint64, isFloat bool, now int64) {
	ms.mu.Lock()
	if t >= ms.lastTs {
		ms.lastTs, ms.lastV, ms.lastFloat = t, v, isFloat
	}
	ms.touched = max(ms.touched, now)
	ms.pending--
	ms.mu.Unlock()
}

// noteWriteLocked tracks which segment(s) the last write (of recs) went to
// and the newest sample timestamp in each. commitMu must be held.
func (s *Storage) noteWriteLocked(recs [][]byte, maxT int64, now time.Time) {
	before := s.curSeg
	// wlog starts the next segment inside Log when a record does not fit,
	// and the only trace of that is the new file. Look for it only once the
	// live segment may be nearly full: curSegBound is an upper bound of the
	// bytes written to it (payload plus per-fragment headers and padding).
	var written int64
	for _, r := range recs {
		written += int64(len(r)) + 13*(int64(len(r))/(pageSize-7)+2)
	}
	s.curSegBound += written
	if s.curSegBound > int64(s.opts.SegmentSize)-s.rotationMargin() {
		for {
			if _, err := os.Stat(wlog.SegmentName(s.dir, s.curSeg+1)); err != nil {
				break
			}
			s.curSeg++
		}
	}
	if s.curSeg != before {
		s.curSegStart = now
		s.curSegBound = written
		s.liveSegment.Store(int64(s.curSeg))
	}
	s.curSegUsed = true
	if maxT == math.MinInt64 {
		return
	}
	for i := before; i <= s.curSeg; i++ {
		if old, ok := s.segMaxT[i]; !ok || maxT > old {
			s.segMaxT[i] = maxT
		}
	}
}

// rotationMargin: while fewer bytes than this are free in the live segment
// by our bound, a record might not fit and wlog might have rotated. wlog
// reserves a 7-byte header on every remaining page when it checks the fit.
func (s *Storage) rotationMargin() int64 {
	return 8*int64(s.opts.SegmentSize/pageSize) + pageSize
}

// Rollback discards the batch. Series created by it stay known (without a
// series record until a later commit uses them).
func (a *appender) Rollback() error {
	a.unpinAll()
	a.release()
	return nil
}

func (a *appender) empty() bool {
	return len(a.samples)+len(a.hists)+len(a.fhists)+len(a.exemplars)+len(a.exSeries) == 0
}

func (a *appender) unpinAll() {
	for _, list := range [][]*memSeries{a.sampleSeries, a.histSeries, a.fhistSeries, a.exSeries} {
		for _, ms := range list {
			ms.unpin()
		}
	}
}

// release clears the batch (dropping references to labels and histograms)
// and returns the appender to the pool.
func (a *appender) release() {
	clear(a.samples)
	clear(a.sampleSeries)
	clear(a.hists)
	clear(a.histSeries)
	clear(a.fhists)
	clear(a.fhistSeries)
	clear(a.exemplars)
	clear(a.exSeries)
	clear(a.metas)
	clear(a.metaSeries)
	clear(a.metaHandles)
	a.metaIn, a.metaH = metadata.Metadata{}, unique.Handle[metadata.Metadata]{}
	clear(a.newSeries)
	clear(a.newSeriesPtr)
	clear(a.recs)
	a.samples, a.sampleSeries = a.samples[:0], a.sampleSeries[:0]
	a.hists, a.histSeries = a.hists[:0], a.histSeries[:0]
	a.fhists, a.fhistSeries = a.fhists[:0], a.fhistSeries[:0]
	a.exemplars, a.exSeries = a.exemplars[:0], a.exSeries[:0]
	a.metas, a.metaSeries, a.metaHandles = a.metas[:0], a.metaSeries[:0], a.metaHandles[:0]
	a.newSeries, a.newSeriesPtr, a.recs = a.newSeries[:0], a.newSeriesPtr[:0], a.recs[:0]
	a.s.appenders.Put(a)
}
