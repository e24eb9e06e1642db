package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"
	"github.com/prometheus/prometheus/tsdb/wlog"
)

// ErrClosed is returned by operations on a closed Storage.
var ErrClosed = errors.New("wal: storage is closed")

// Storage is the agent's write-ahead log. It implements storage.AppendableV2.
type Storage struct {
	dir     string
	opts    Options
	logger  *slog.Logger
	wal     *wlog.WL // commitMu to replace; nil while a failed write could not be reopened
	reg     prometheus.Registerer
	series  *stripeSeries
	metrics *metrics
	now     func() time.Time // wall clock; tests replace it

	nextRef      atomic.Uint64 // last ref handed out
	maxLoggedRef atomic.Uint64 // highest ref with a series record in the WAL
	numSeries    atomic.Int64
	liveSegment  atomic.Int64

	appenders sync.Pool

	// writes carries every wlog.Log call of a commit to the writer goroutine
	// (see writer); writerDone is closed when it has returned.
	writes     chan logRequest
	writerDone chan struct{}

	// commitMu serialises writes to the WAL so that the series record of a
	// new series always precedes, in the log, every record that refers to it,
	// and so that the segment a write lands in is known.
	commitMu    sync.Mutex
	closed      bool          // commitMu
	curSeg      int           // commitMu: the live segment
	curSegStart time.Time     // commitMu: when the live segment was started
	curSegUsed  bool          // commitMu: records were written to the live segment
	curSegBound int64         // commitMu: upper bound of the bytes in the live segment
	segMaxT     map[int]int64 // commitMu: newest sample timestamp per segment

	// A write that failed (disk full, file system read-only) leaves wlog's
	// page with a partial batch, maybe a torn record. Until the WAL is
	// reopened and that record cut away, commits are refused rather than
	// written after it. See unwritable.go.
	writeErr      error     // commitMu: the failure; nil when writable
	writeErrSince time.Time // commitMu
	refusedSince  int       // commitMu: samples refused in this episode
	lastReopen    time.Time // commitMu: the last attempt to reopen
	unwritable    atomic.Bool

	// truncMu serialises truncation passes (and Close with them).
	truncMu sync.Mutex
	// deleted maps forgotten series (and replayed duplicates) to the last
	// segment that may hold a record referring to them: the checkpoint keeps
	// their series record until truncation has passed that segment.
	deleted map[chunks.HeadSeriesRef]int // truncMu (and Open)
	// deletedPeak is the most entries deleted held since it was made (see shrink).
	deletedPeak int // truncMu (and Open)
	// unsent tracks the current episode of deleting unsent data, to log it once.
	unsent unsentEpisode // truncMu
}

var (
	_ storage.AppendableV2 = (*Storage)(nil)
)

// Open opens the WAL in dir (created if missing), replays the last checkpoint
// and every later segment to rebuild the series map, repairs a corrupt tail
// and returns the Storage ready for appends. The caller owns Run and Close.
// A nil logger discards logs; a nil reg registers no metrics.
func Open(dir string, opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Storage, error) {
	return open(dir, opts, logger, reg, time.Now)
}

func open(dir string, opts Options, logger *slog.Logger, reg prometheus.Registerer, now func() time.Time) (*Storage, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Storage{
		dir:     dir,
		opts:    opts,
		logger:  logger,
		reg:     reg,
		series:  newStripeSeries(),
		now:     now,
		segMaxT: map[int]int64{},
		deleted: map[chunks.HeadSeriesRef]int{},
	}
	s.appenders.New = func() any { return &appender{s: s} }
	if s.metrics, err = newMetrics(s, reg); err != nil {
		return nil, fmt.Errorf("wal: register metrics: %w", err)
	}
	s.wal, err = wlog.NewSize(logger, reg, dir, opts.SegmentSize, opts.Compression)
	if err != nil {
		s.metrics.unregister()
		return nil, fmt.Errorf("wal: open %s: %w", dir, err)
	}
	if err := s.replay(); err != nil {
		s.wal.Close()
		s.metrics.unregister()
		return nil, err
	}
	_, last, err := wlog.Segments(dir)
	if err != nil {
		s.wal.Close()
		s.metrics.unregister()
		return nil, fmt.Errorf("wal: list segments: %w", err)
	}
	s.curSeg = last
	s.curSegStart = s.now()
	s.liveSegment.Store(int64(last))
	s.writes, s.writerDone = make(chan logRequest), make(chan struct{})
	go s.writer()
	return s, nil
}

// logRequest is one commit's records for the writer, which answers on done.
type logRequest struct {
	w    *wlog.WL
	recs [][]byte
	done chan error
}

// writer makes every wlog.Log call of every commit, one at a time (commits
// are serialised by commitMu anyway). It exists for the stacks: wlog
// compresses records with snappy, whose amd64 and arm64 encoder keeps a
// 32 KiB hash table on the stack, so every goroutine that writes grows its
// stack to 64 KiB and keeps it between scrapes. Writing from here keeps
// that on one stack instead of on every scrape loop's (about 48 KiB less
// per target). It returns when Close closes writes.
func (s *Storage) writer() {
	defer close(s.writerDone)
	for r := range s.writes {
		r.done <- r.w.Log(r.recs...)
	}
}

// logLocked writes recs through the writer and waits for the result.
// commitMu must be held (it is what makes Close wait for this to return).
func (s *Storage) logLocked(recs [][]byte, done chan error) error {
	s.writes <- logRequest{w: s.wal, recs: recs, done: done}
	return <-done
}

// SeriesLabels returns the labels of series ref while the WAL holds it in
// memory. A remote-write queue keeps this label set instead of a copy of
// its own (label sets are immutable, so sharing one is safe).
func (s *Storage) SeriesLabels(ref chunks.HeadSeriesRef) (labels.Labels, bool) {
	if ms := s.series.getByRef(ref); ms != nil {
		return ms.lset, true
	}
	return labels.EmptyLabels(), false
}

// LiveSegment is the segment the WAL writes to now. It moves on once the
// next segment's file exists and before the commit that wrote into it
// returns (and calls Options.OnCommit).
func (s *Storage) LiveSegment() int { return int(s.liveSegment.Load()) }

// Dir returns the WAL directory (the one given to Open).
func (s *Storage) Dir() string { return s.dir }

// ActiveSeries returns the number of series the WAL currently knows.
func (s *Storage) ActiveSeries() int { return int(s.numSeries.Load()) }

// AppenderV2 returns an appender for one batch (one scrape). It implements
// storage.ExemplarAppenderV2 too. The context is not used.
func (s *Storage) AppenderV2(context.Context) storage.AppenderV2 {
	a := s.appenders.Get().(*appender)
	a.minT = s.now().Add(-s.opts.MaxAge).UnixMilli()
	return a
}

// Run truncates the WAL and forgets idle series every TruncateInterval until
// ctx is done. It returns nil when ctx ends; truncation errors are logged and
// counted, never fatal.
func (s *Storage) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.TruncateInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := s.Truncate(); err != nil {
				if errors.Is(err, ErrClosed) {
					return nil
				}
				s.logger.Warn("WAL truncation failed", "err", err)
			}
		}
	}
}

// Close flushes and fsyncs the live segment and closes the WAL. Appenders
// still open fail on Commit with ErrClosed.
func (s *Storage) Close() error {
	s.truncMu.Lock()
	defer s.truncMu.Unlock()
	s.commitMu.Lock()
	if s.closed {
		s.commitMu.Unlock()
		return ErrClosed
	}
	s.closed = true
	close(s.writes) // no commit is writing: they hold commitMu while they do
	<-s.writerDone
	var err error
	if s.wal != nil {
		err = s.wal.Close()
	}
	s.commitMu.Unlock()
	s.metrics.unregister()
	return err
}

// replay rebuilds the in-memory state from the last checkpoint and the
// segments after it. A corrupt segment is repaired: it is cut at the first
// bad record and later segments are deleted.
func (s *Storage) replay() error {
	start := time.Now()
	r := &replayer{
		s:       s,
		dec:     record.NewDecoder(labels.NewSymbolTable(), s.logger),
		dupes:   map[chunks.HeadSeriesRef]chunks.HeadSeriesRef{},
		touched: s.now().UnixMilli(),
	}

	cpDir, cpIdx, err := wlog.LastCheckpoint(s.dir)
	switch {
	case errors.Is(err, record.ErrNotFound):
		cpIdx = -1
	case err != nil:
		return fmt.Errorf("wal: find checkpoint: %w", err)
	default:
		sr, err := wlog.NewSegmentsReader(cpDir)
		if err != nil {
			return fmt.Errorf("wal: open checkpoint %s: %w", cpDir, err)
		}
		err = r.read(wlog.NewReader(sr), cpIdx, false)
		sr.Close()
		if err != nil {
			// Not repairable: segments after it refer to the series it holds.
			// %v, not %w: this must never reach wlog's Repair.
			return fmt.Errorf("wal: checkpoint %s is corrupt (move the WAL directory away to start afresh): %v", cpDir, err)
		}
		s.logger.Info("WAL checkpoint replayed", "checkpoint", cpDir)
	}

	first, last, err := wlog.Segments(s.dir)
	if err != nil {
		return fmt.Errorf("wal: list segments: %w", err)
	}
	from := max(first, cpIdx+1)
	n := last - from + 1
	for i := from; i <= last; i++ {
		s.logger.Info(fmt.Sprintf("replaying WAL segment %d of %d", i-from+1, n), "segment", i)
		if s.opts.OnReplay != nil {
			s.opts.OnReplay(i-from+1, n)
		}
		err := r.readSegment(i)
		if err == nil {
			continue
		}
		var cerr *wlog.CorruptionErr
		if !errors.As(err, &cerr) || cerr.Segment < 0 {
			return fmt.Errorf("wal: replay segment %d: %w", i, err)
		}
		s.logger.Warn("WAL segment is corrupt or torn; repairing (records before the damage are kept, later ones dropped)",
			"segment", cerr.Segment, "offset", cerr.Offset, "err", cerr.Err)
		if err := s.wal.Repair(err); err != nil {
			return fmt.Errorf("wal: repair segment %d: %w", cerr.Segment, err)
		}
		// Segment numbers after the cut are reused: tell remote-write queues.
		if err := recordRepair(s.dir, cerr.Segment, cerr.Offset); err != nil {
			return fmt.Errorf("wal: recording the repair of segment %d: %w", cerr.Segment, err)
		}
		s.metrics.corruptionsRepaired.Inc()
		break // Repair removed everything after the damage.
	}

	s.deletedPeak = len(s.deleted)
	s.nextRef.Store(uint64(r.maxRef))
	s.maxLoggedRef.Store(uint64(r.maxRef))
	d := time.Since(start)
	s.metrics.replayDuration.Set(d.Seconds())
	s.logger.Info("WAL replay completed", "duration", d, "series", s.numSeries.Load(), "segments", n)
	return nil
}

type replayer struct {
	s       *Storage
	dec     record.Decoder
	maxRef  chunks.HeadSeriesRef
	dupes   map[chunks.HeadSeriesRef]chunks.HeadSeriesRef // older ref -> ref now used for the labels
	touched int64

	series  []record.RefSeries
	samples []record.RefSample
	hists   []record.RefHistogramSample
	fhists  []record.RefFloatHistogramSample
	metas   []record.RefMetadata
}

func (r *replayer) readSegment(i int) error {
	seg, err := wlog.OpenReadSegment(wlog.SegmentName(r.s.dir, i))
	if err != nil {
		return err
	}
	sr := wlog.NewSegmentBufReader(seg)
	defer sr.Close()
	return r.read(wlog.NewReader(sr), i, true)
}

// read applies every record of one segment (or checkpoint, isSegment false)
// with index idx.
func (r *replayer) read(rd *wlog.Reader, idx int, isSegment bool) error {
	corrupt := func(what string, err error) error {
		return &wlog.CorruptionErr{Err: fmt.Errorf("decode %s: %w", what, err), Segment: rd.Segment(), Offset: rd.Offset()}
	}
	maxT := int64(math.MinInt64)
	defer func() {
		// Also when the segment turns out damaged: what was read is in it.
		if isSegment && maxT != math.MinInt64 {
			r.s.segMaxT[idx] = maxT
		}
	}()
	var err error
	for rd.Next() {
		rec := rd.Record()
		switch r.dec.Type(rec) {
		case record.Series:
			if r.series, err = r.dec.Series(rec, r.series[:0]); err != nil {
				return corrupt("series", err)
			}
			for _, e := range r.series {
				r.addSeries(e, idx)
			}
		case record.Samples, record.SamplesV2:
			if r.samples, err = r.dec.Samples(rec, r.samples[:0]); err != nil {
				return corrupt("samples", err)
			}
			for _, e := range r.samples {
				if ms := r.resolve(e.Ref, idx); ms != nil {
					ms.sawSample(e.T, math.Float64bits(e.V), true)
				}
				maxT = max(maxT, e.T)
			}
		case record.HistogramSamples, record.HistogramSamplesV2, record.CustomBucketsHistogramSamples:
			if r.hists, err = r.dec.HistogramSamples(rec, r.hists[:0]); err != nil {
				return corrupt("histograms", err)
			}
			for _, e := range r.hists {
				if ms := r.resolve(e.Ref, idx); ms != nil {
					ms.sawSample(e.T, 0, false)
				}
				maxT = max(maxT, e.T)
			}
			clear(r.hists)
		case record.FloatHistogramSamples, record.FloatHistogramSamplesV2, record.CustomBucketsFloatHistogramSamples:
			if r.fhists, err = r.dec.FloatHistogramSamples(rec, r.fhists[:0]); err != nil {
				return corrupt("float histograms", err)
			}
			for _, e := range r.fhists {
				if ms := r.resolve(e.Ref, idx); ms != nil {
					ms.sawSample(e.T, 0, false)
				}
				maxT = max(maxT, e.T)
			}
			clear(r.fhists)
		case record.Metadata:
			if r.metas, err = r.dec.Metadata(rec, r.metas[:0]); err != nil {
				return corrupt("metadata", err)
			}
			for _, e := range r.metas {
				if ms := r.resolve(e.Ref, idx); ms != nil {
					ms.meta = unique.Make(metadata.Metadata{Type: record.ToMetricType(e.Type), Unit: e.Unit, Help: e.Help})
				}
			}
		default:
			// Exemplars and tombstones carry nothing replay needs; unknown
			// types may come from a newer version and are skipped.
		}
	}
	return rd.Err()
}

func (r *replayer) addSeries(e record.RefSeries, idx int) {
	s := r.s
	r.maxRef = max(r.maxRef, e.Ref)
	if s.series.getByRef(e.Ref) != nil {
		return // the same record seen twice
	}
	if _, ok := r.dupes[e.Ref]; ok {
		return
	}
	hash := e.Labels.Hash()
	ms := newMemSeries(e.Ref, e.Labels, hash, r.touched)
	ms.logged = true
	got, created := s.series.getOrSet(ms)
	if created {
		s.numSeries.Add(1)
		return
	}
	// The same labels under two refs: the series was forgotten and came
	// back. The higher ref is the newer one and stays; the other is kept in
	// the checkpoint while segments may still refer to it.
	older, newer := e.Ref, got
	if e.Ref > got.ref {
		older, newer = got.ref, ms
		ms.lastTs, ms.lastV, ms.lastFloat, ms.meta = got.lastTs, got.lastV, got.lastFloat, got.meta
		s.series.replaceByLabels(got, ms)
		s.series.deleteRef(got.ref)
		for k, v := range r.dupes {
			if v == got.ref {
				r.dupes[k] = ms.ref
			}
		}
	}
	r.dupes[older] = newer.ref
	s.deleted[older] = max(s.deleted[older], idx)
}

// resolve finds the series a record of segment idx refers to.
func (r *replayer) resolve(ref chunks.HeadSeriesRef, idx int) *memSeries {
	if to, ok := r.dupes[ref]; ok {
		r.s.deleted[ref] = max(r.s.deleted[ref], idx)
		ref = to
	}
	return r.s.series.getByRef(ref)
}

// sawSample records a replayed sample.
func (ms *memSeries) sawSample(t int64, v uint64, isFloat bool) {
	ms.mu.Lock()
	if t >= ms.lastTs {
		ms.lastTs, ms.lastV, ms.lastFloat = t, v, isFloat
	}
	ms.mu.Unlock()
}
