package remotewrite

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/record"

	"github.com/shoal-dev/shoal/wal"
)

// Tunables that are not part of the Prometheus configuration. Variables so
// that tests can shorten them.
var (
	// pollInterval is how often a queue looks at the WAL without a Notify.
	pollInterval = 500 * time.Millisecond
	// persistInterval is the least time between two progress file writes.
	persistInterval = time.Second
)

// settings is the resolved queue_config and related parts of one
// remote_write entry.
type settings struct {
	capacity, minShards, maxShards, maxPerSend int
	deadline, minBackoff, maxBackoff           time.Duration

	sendExemplars, sendHistograms, sendMetadata bool
	v2                                          bool // Remote-Write 2.0

	// external is the external labels in name order, without empty values
	// (which no series carries).
	external   []labels.Label
	relabel    []*relabel.Config
	separateBy string // Manager.SeparateBy
}

// itemKind says which field of an item is set.
type itemKind uint8

const (
	kindSample itemKind = iota
	kindHistogram
	kindFloatHistogram
	kindExemplar
)

// item is one sample, histogram or exemplar read from the WAL, with the
// cached labels of its series (see storeSeries).
type item struct {
	ref  chunks.HeadSeriesRef
	t    int64
	v    float64
	lbls labels.Labels
	// meta is the series' metadata, for Remote-Write 2.0 requests.
	meta *seriesMeta
	// x is what only histograms, exemplars and items in flight at the last
	// stop carry; nil for a plain sample, which keeps items at 64 bytes (a
	// round holds up to shards × capacity of them).
	x    *itemExtra
	kind itemKind
}

type itemExtra struct {
	h      *histogram.Histogram
	fh     *histogram.FloatHistogram
	exLbls labels.Labels
	// group is non-zero for an item that was in flight when the queue last
	// stopped without settling it: the id of that request (see journal.go).
	group uint64
}

// group is the request the item was in flight in at the last stop, or 0.
func (it *item) group() uint64 {
	if it.x == nil {
		return 0
	}
	return it.x.group
}

// chunk is what the queue read from the WAL and has not sent yet.
type chunk struct {
	items                          []item
	metadata                       []prompb.MetricMetadata
	samples, histograms, exemplars int
	inFlight                       int       // items with a group (in flight at the last stop)
	first                          time.Time // when the first item was added
	end                            position  // reader position after the last record read into it
}

func (c *chunk) n() int { return len(c.items) + len(c.metadata) }

func (c *chunk) reset() {
	clear(c.items) // let label strings and histograms be collected
	c.items = c.items[:0]
	c.metadata = nil
	c.samples, c.histograms, c.exemplars, c.inFlight = 0, 0, 0, 0
}

// counts is how much of each kind a request carries.
type counts struct {
	samples, histograms, exemplars, metadata int
	maxT                                     int64
}

// seriesEntry is what the queue keeps per series ref.
type seriesEntry struct {
	lbls labels.Labels // final labels but for encodeExternal's; empty when dropped
	// seg is the last segment (or checkpoint index) that defined it. WAL
	// segment numbers have 8 digits; int32 keeps a page entry at 24 bytes.
	seg     int32
	dropped bool // write_relabel_configs dropped it
	inPage  bool // seriesTable's own: the page slot is in use
}

// queue sends the WAL to one remote_write endpoint. One goroutine (run) owns
// the reader, the series cache and the position; during a round it starts
// one goroutine per shard and waits for all of them.
type queue struct {
	name, url    string // url is redacted
	logger       *slog.Logger
	spec         *spec
	s            settings
	opts         QueueOptions // resolved: no zero values
	pauses       pauseState
	client       remote.WriteClient
	m            *queueMetrics
	progressPath string

	reader *walReader
	dec    record.Decoder
	lb     *labels.Builder
	series seriesTable
	// local is the WAL read, when it is open in this process: the cache
	// keeps its label sets instead of copies where it can
	// (Manager.AttachWAL); nil keeps copies.
	local LocalWAL

	saved      position // from the progress file
	savedFound bool
	walRepairs int      // the WAL's repair generation, written with every position
	acked      position // everything before is acknowledged or dropped
	persisted  position // last position written to the progress file
	lastWrite  time.Time
	pendingSeg atomic.Int64 // segment of persisted, for PendingSegment

	// journal records sent and settled requests between progress writes;
	// rec is what it said at start-up, until the queue is past it.
	journal       *journal
	rec           *recovery
	journalFailed atomic.Bool
	unsettled     bool         // a round was cut short: the journal holds its requests
	failRun       atomic.Int64 // failed attempts since the last success

	// metadata_config: the periodic re-send (metadata.go).
	metaCache      metadataCache
	metaInterval   time.Duration
	metaMaxPerSend int
	seriesMeta     map[chunks.HeadSeriesRef]*seriesMeta // Remote-Write 2.0 only

	notify   chan struct{}
	drain    chan struct{} // closed by stop: send what is there and exit
	stopOnce sync.Once
	started  bool
	cancel   context.CancelFunc
	done     chan struct{}

	// handoff is the Manager's hand-off state (nil in tests without one);
	// hq is this queue's part of it. See handoff.go.
	handoff *handoff
	hq      queueHandoff

	// shardBufs are the send buffers of each shard, reused across chunks.
	shardBufs []*shardBuffers

	// decode buffers, reused.
	bufSeries  []record.RefSeries
	bufSamples []record.RefSample
	bufHist    []record.RefHistogramSample
	bufFHist   []record.RefFloatHistogramSample
	bufEx      []record.RefExemplar
	bufMeta    []record.RefMetadata
}

func newQueue(sp *spec, walDir, progressDir string, client remote.WriteClient, m *metrics, logger *slog.Logger) *queue {
	q := &queue{
		name:         sp.name,
		url:          sp.redactedURL,
		logger:       logger.With("remote_name", sp.name, "url", sp.redactedURL),
		spec:         sp,
		s:            sp.settings,
		opts:         sp.opts.resolved(),
		client:       client,
		m:            m.forQueue(sp.name, sp.redactedURL),
		progressPath: filepath.Join(progressDir, sp.name+".json"),
		journal:      newJournal(filepath.Join(progressDir, sp.name+".acks")),
		dec:          record.NewDecoder(labels.NewSymbolTable(), logger),
		lb:           labels.NewBuilder(labels.EmptyLabels()),
		notify:       make(chan struct{}, 1),
		drain:        make(chan struct{}),
		done:         make(chan struct{}),
	}
	q.metaInterval = time.Duration(sp.rw.MetadataConfig.SendInterval)
	if q.metaInterval <= 0 {
		q.metaInterval = defaultMetadataInterval
	}
	q.metaMaxPerSend = sp.rw.MetadataConfig.MaxSamplesPerSend
	if q.metaMaxPerSend <= 0 {
		q.metaMaxPerSend = defaultMetadataMaxPerSend
	}
	q.reader = newWALReader(walDir, q.logger)
	q.reader.replayFn = func(rec []byte, seg int) { q.handleRecord(rec, seg, false, nil) }
	q.reader.gcFn = q.gcSeries
	q.reader.skipFn = func(n int) { q.m.segmentsSkipped.Add(float64(n)) }
	q.reader.errFn = q.m.walReadErrors.Inc

	pf, found, err := readProgress(q.progressPath)
	if err != nil {
		// Starting over resends data (duplicates) but loses nothing.
		q.logger.Error("Unreadable remote-write progress file; starting at the first WAL segment", "file", q.progressPath, "err", err)
		q.m.pwErrs.Inc()
	}
	pos := pf.position()
	repairs, err := wal.ReadRepairs(walDir)
	if err != nil {
		q.logger.Warn("Unreadable WAL repair record; assuming no repair", "err", err)
	}
	q.walRepairs = repairs.Generation
	q.journal.lastRepair = repairs
	if found && pf.WALRepairs < repairs.Generation {
		// The WAL was repaired after this position was saved: past the cut,
		// segment numbers may hold new records. A position past the cut goes
		// back to it (everything before the cut is unchanged and was
		// acknowledged); a position before it is still exact.
		if seg, off, past := repairs.Cut(pos.Segment, pos.Offset); past {
			q.logger.Warn("The WAL was repaired past the saved position; re-reading from the cut",
				"saved_segment", pos.Segment, "saved_offset", pos.Offset, "cut_segment", seg, "cut_offset", off)
			pos = position{Segment: seg, Offset: off}
		}
	}
	q.saved, q.savedFound = pos, found
	q.acked, q.persisted = pos, pos
	// Until the reader has opened and knows where it really starts, hold on
	// to the whole WAL: the saved segment may lie beyond a WAL that was
	// replaced, and everything would look acknowledged.
	q.pendingSeg.Store(0)
	q.m.progressSegment.Set(float64(pos.Segment))
	q.m.progressOffset.Set(float64(pos.Offset))

	q.m.shardsMin.Set(float64(q.s.minShards))
	q.m.shardsMax.Set(float64(q.s.maxShards))
	q.m.shards.Set(float64(q.s.minShards))
	q.m.shardsDesired.Set(float64(q.s.minShards))
	q.m.shardCap.Set(float64(q.s.capacity))
	q.m.maxPerSend.Set(float64(q.s.maxPerSend))
	return q
}

// start runs the queue until parent is done or stop is called. The caller
// holds the manager lock.
func (q *queue) start(parent context.Context) {
	if q.started {
		return
	}
	q.started = true
	ctx, cancel := context.WithCancel(parent)
	q.cancel = cancel
	go q.run(ctx)
	if h := testHookStarted.Load(); h != nil {
		(*h)()
	}
}

// testHookStarted, if set (tests only), is called by start once the queue's
// goroutine is started: a truncation pass run there must already see it.
var testHookStarted atomic.Pointer[func()]

// stop makes the queue send what it has (reading the WAL to its current end)
// for at most flushDeadline, persist its progress and exit.
func (q *queue) stop(flushDeadline time.Duration) {
	q.stopOnce.Do(func() { close(q.drain) })
	if !q.started {
		return
	}
	t := time.AfterFunc(flushDeadline, q.cancel)
	<-q.done
	t.Stop()
	q.cancel()
}

func (q *queue) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *queue) run(ctx context.Context) {
	defer close(q.done)
	defer q.reader.close()
	defer q.journal.close()
	defer q.persist()

	poll := time.NewTicker(pollInterval)
	defer poll.Stop()

	draining := false
	wait := func(extra <-chan time.Time) bool {
		var drainC <-chan struct{}
		if !draining {
			drainC = q.drain
		}
		select {
		case <-ctx.Done():
			return false
		case <-drainC:
			draining = true
		case <-q.notify:
		case <-poll.C:
		case <-extra:
		}
		return true
	}

	// Open: cache series of the checkpoint and of segments before the saved
	// position. Retry until the WAL exists.
	logged := false
	for {
		start, err := q.reader.open(ctx, q.saved, q.savedFound)
		if err == nil {
			q.acked = start
			q.publishAcked()
			q.pendingSeg.Store(int64(start.Segment))
			q.openJournal(start)
			q.logger.Info("Remote-write queue started", "segment", start.Segment, "offset", start.Offset, "series", q.series.len())
			break
		}
		if ctx.Err() != nil {
			return
		}
		if !logged || !errors.Is(err, errNoSegments) {
			q.logger.Warn("Cannot open the WAL yet; retrying", "err", err)
			logged = true
		}
		if !wait(nil) || draining {
			return
		}
	}

	if q.s.sendMetadata && !q.s.v2 {
		mctx, mcancel := context.WithCancel(ctx)
		mdone := make(chan struct{})
		go func() {
			defer close(mdone)
			q.metadataLoop(mctx)
		}()
		defer func() { mcancel(); <-mdone }()
	}

	shards := q.s.minShards
	c := &chunk{}
	var lastErr string
	for {
		limit := shards * max(q.s.capacity, q.s.maxPerSend)
		full, rerr := q.fill(ctx, c, limit)
		if rerr != nil {
			if msg := rerr.Error(); msg != lastErr {
				q.logger.Warn("Error reading the WAL; retrying", "err", rerr)
				lastErr = msg
			}
		} else {
			lastErr = ""
		}
		q.m.samplesPending.Set(float64(c.samples))
		q.m.histogramsPending.Set(float64(c.histograms))
		q.m.exemplarsPending.Set(float64(c.exemplars))

		if c.n() > 0 && (full || draining || c.n() >= shards*q.s.maxPerSend || time.Since(c.first) >= q.s.deadline || q.handoff.flushWanted(q.acked)) {
			ok, retried := q.sendChunk(ctx, c, shards)
			if !ok {
				// Cancelled: c stays unacknowledged and is read again next
				// time; the journal knows which of its requests were settled.
				q.unsettled = true
				return
			}
			q.acked = c.end
			q.endRecovery(!full && rerr == nil)
			q.publishAcked()
			c.reset()
			q.m.samplesPending.Set(0)
			q.m.histogramsPending.Set(0)
			q.m.exemplarsPending.Set(0)
			shards = q.reshard(shards, full, retried)
			q.trimBuffers(c, shards)
			q.maybePersist()
			continue
		}
		if c.n() == 0 {
			// Everything read so far is done (series records, dropped data).
			q.acked = c.end
			q.endRecovery(false)
			q.publishAcked()
		}
		if draining && c.n() == 0 {
			return
		}
		if draining && rerr != nil {
			return // cannot read further; what is acknowledged is persisted
		}
		q.maybePersist()

		var timer *time.Timer
		var timerC <-chan time.Time
		if d := q.nextWakeup(c); d > 0 {
			timer = time.NewTimer(d)
			timerC = timer.C
		}
		ok := wait(timerC)
		if timer != nil {
			timer.Stop()
		}
		if !ok {
			return
		}
	}
}

// nextWakeup is how long the loop may sleep before a batch deadline or a
// pending progress write is due (0: no such event).
func (q *queue) nextWakeup(c *chunk) time.Duration {
	var d time.Duration
	if c.n() > 0 {
		d = max(time.Until(c.first.Add(q.s.deadline)), time.Millisecond)
	}
	if q.acked != q.persisted {
		pd := max(time.Until(q.lastWrite.Add(persistInterval)), time.Millisecond)
		if d == 0 || pd < d {
			d = pd
		}
	}
	return d
}

// reshard picks the shard count for the next round: double while the queue
// is behind (the round was cut by size, not by the end of the WAL) and sends
// go through without retries; halve once it has caught up.
func (q *queue) reshard(cur int, behind, retried bool) int {
	next := cur
	switch {
	case behind && !retried:
		next = min(cur*2, q.s.maxShards)
	case !behind:
		next = max(cur/2, q.s.minShards)
	}
	if next != cur {
		q.logger.Debug("Resharding", "from", cur, "to", next)
		q.m.shards.Set(float64(next))
		q.m.shardsDesired.Set(float64(next))
	}
	return next
}

// trimBuffers lets the memory of bigger rounds go once the queue needs
// smaller ones: after catching up with a backlog at max_shards, the round
// and the buffers of the shards no longer used would otherwise keep the
// size of the largest round for good.
func (q *queue) trimBuffers(c *chunk, shards int) {
	if limit := shards * max(q.s.capacity, q.s.maxPerSend); cap(c.items) > 2*limit {
		c.items = nil
	}
	if len(q.shardBufs) > shards {
		clear(q.shardBufs[shards:])
		q.shardBufs = q.shardBufs[:shards]
	}
}

// fill reads records into c until it holds limit items or the WAL has no
// more for now. full reports that the limit was hit.
func (q *queue) fill(ctx context.Context, c *chunk, limit int) (full bool, err error) {
	defer func() { c.end = q.readPos() }()
	// While recovering, read the whole stretch the journal covers into one
	// round, so that each request in flight at the crash is sent again whole.
	for c.n() < limit || (q.rec != nil && q.readPos().less(q.rec.end)) {
		if ctx.Err() != nil {
			return false, nil
		}
		rec, seg, sendable, err := q.nextRecord(ctx)
		if err != nil {
			return false, err
		}
		if rec == nil {
			return false, nil
		}
		q.handleRecord(rec, seg, sendable, c)
	}
	return true, nil
}

// persist writes the acknowledged position if it moved, then starts the
// journal afresh there. While recovering it writes nothing: the journal's
// records are needed until the queue is past them; nor after a round was cut
// short, whose settled requests only the journal knows.
func (q *queue) persist() {
	if q.acked == q.persisted || q.rec != nil || q.unsettled {
		return
	}
	pos := q.acked
	err := writeProgress(q.progressPath, progressFile{
		Version:    progressVersion,
		Queue:      q.name,
		URL:        q.url,
		Segment:    pos.Segment,
		Offset:     pos.Offset,
		UpdatedAt:  time.Now().UTC(),
		WALRepairs: q.walRepairs,
	})
	q.lastWrite = time.Now()
	if err != nil {
		q.m.pwErrs.Inc()
		q.logger.Error("Cannot write remote-write progress file", "file", q.progressPath, "err", err)
		return
	}
	q.persisted = pos
	if err := q.journal.reset(pos, q.walRepairs); err != nil {
		q.journalErr(err)
	}
	q.pendingSeg.Store(int64(pos.Segment))
	q.m.progressSegment.Set(float64(pos.Segment))
	q.m.progressOffset.Set(float64(pos.Offset))
}

// openJournal loads what the journal says about the data after start and
// opens it for appending. The journal starts where the progress file points
// (or, without one, where the last run started too); when a WAL limit
// deleted data after that position, what it says about the data from start
// on is still true.
func (q *queue) openJournal(start position) {
	keep := false
	base := start
	if q.savedFound {
		base = q.saved
	}
	if !start.less(base) {
		rec, err := q.journal.load(base, q.walRepairs)
		if err != nil {
			q.logger.Warn("Unreadable acknowledgement journal; requests in flight at the last stop may be sent twice", "err", err)
			q.m.pwErrs.Inc()
		}
		if rec != nil {
			q.rec, keep = rec, true
			q.logger.Info("Resuming with the acknowledgement journal: acknowledged requests are not sent again, requests in flight are sent alone",
				"acknowledged_series", len(rec.acked), "in_flight_series", len(rec.pending), "until_segment", rec.end.Segment, "until_offset", rec.end.Offset)
		}
	}
	// Ids only need to differ from the ones of earlier runs kept in the file.
	if err := q.journal.open(base, q.walRepairs, keep, uint64(time.Now().UnixNano())); err != nil {
		q.journalErr(err)
	}
}

// endRecovery drops the journal's start-up view once the queue is past it,
// or has sent everything up to the end of the WAL (which a repair may have
// cut before the journal's end).
func (q *queue) endRecovery(atWALEnd bool) {
	if q.rec != nil && (atWALEnd || !q.acked.less(q.rec.end)) {
		q.rec = nil
	}
}

// addItem adds a data item to c unless the journal says the receiver already
// settled it; an item in flight at the crash is tagged with its request.
func (q *queue) addItem(c *chunk, it item) bool {
	if q.rec != nil {
		skip, group := q.rec.classify(it.ref, it.kind == kindExemplar, it.t)
		if skip {
			if it.kind != kindExemplar {
				q.m.resent.WithLabelValues(resendSkipped).Inc()
			}
			return false
		}
		if group != 0 {
			x := itemExtra{group: group}
			if it.x != nil {
				x = *it.x
				x.group = group
			}
			it.x = &x
		}
	}
	if q.seriesMeta != nil {
		it.meta = q.seriesMeta[it.ref]
	}
	c.add(it)
	return true
}

func (q *queue) maybePersist() {
	if q.acked != q.persisted && time.Since(q.lastWrite) >= persistInterval {
		q.persist()
	}
}

// storeSeries caches the final labels of new series, without the external
// labels where the encoder adds them (encodeExternal), and in the WAL's
// label set rather than a copy wherever they are the same.
func (q *queue) storeSeries(series []record.RefSeries, seg int) {
	for _, s := range series {
		if q.encodeExternal() && !s.Labels.IsEmpty() {
			q.series.set(s.Ref, seriesEntry{lbls: q.shared(s.Ref, s.Labels), seg: int32(seg)})
			continue
		}
		q.lb.Reset(s.Labels)
		// Series labels win over external labels, as in Prometheus.
		for _, l := range q.s.external {
			if q.lb.Get(l.Name) == "" {
				q.lb.Set(l.Name, l.Value)
			}
		}
		keep := relabel.ProcessBuilder(q.lb, q.s.relabel...)
		e := seriesEntry{seg: int32(seg)}
		if keep {
			e.lbls = q.lb.Labels()
			if len(q.s.external) == 0 {
				// Nothing added: relabelling may have left the WAL's labels.
				e.lbls = q.shared(s.Ref, e.lbls)
			}
			keep = !e.lbls.IsEmpty()
		}
		e.dropped = !keep
		if !keep {
			e.lbls = labels.EmptyLabels()
		}
		q.series.set(s.Ref, e)
	}
	q.m.seriesCached.Set(float64(q.series.len()))
}

// encodeExternal says whether the encoders add the external labels a series
// lacks, rather than the cache: without write_relabel_configs (which see
// the external labels) a series' cached labels are then its WAL labels,
// which the cache can share. It is decided per queue: a per-series flag in
// the cache entry or the item slowed every sample's lookup.
func (q *queue) encodeExternal() bool { return len(q.s.relabel) == 0 }

// shared returns the WAL's own label set of ref when it equals lbls, so
// that the cache holds no second copy of it; otherwise lbls.
func (q *queue) shared(ref chunks.HeadSeriesRef, lbls labels.Labels) labels.Labels {
	if q.local == nil {
		return lbls
	}
	if wl, ok := q.local.SeriesLabels(ref); ok && labels.Equal(wl, lbls) {
		return wl
	}
	return lbls
}

// attach makes the queue ask w, the WAL it reads (see LocalWAL); nil asks
// the file system.
func (q *queue) attach(w LocalWAL) {
	q.local = w
	if w != nil {
		q.reader.live = w.LiveSegment
	}
}

// gcSeries forgets series that the WAL no longer has: defined before the
// checkpoint cpIndex and not carried into it.
func (q *queue) gcSeries(cpIndex int) {
	n := q.series.deleteIf(func(e seriesEntry) bool { return int(e.seg) < cpIndex })
	for ref := range q.seriesMeta {
		if _, ok := q.series.get(ref); !ok {
			delete(q.seriesMeta, ref)
		}
	}
	q.m.seriesCached.Set(float64(q.series.len()))
	if n > 0 {
		q.logger.Debug("Forgot series gone from the WAL", "checkpoint", cpIndex, "series", n, "remaining", q.series.len())
	}
}

// lookup returns the labels of ref, counting a drop when there are none.
func (q *queue) lookup(ref chunks.HeadSeriesRef, dropped func(reason string)) (labels.Labels, bool) {
	e, ok := q.series.get(ref)
	switch {
	case !ok:
		dropped(reasonUnknownSeries)
		return labels.EmptyLabels(), false
	case e.dropped:
		dropped(reasonDroppedSeries)
		return labels.EmptyLabels(), false
	}
	return e.lbls, true
}

func (q *queue) decodeErr(typ record.Type, err error) {
	q.m.walReadErrors.Inc()
	q.logger.Warn("Cannot decode WAL record; skipping it", "type", typ.String(), "err", err)
}

// handleRecord decodes one WAL record. Series and metadata are always
// cached; data is added to c only when sendable.
func (q *queue) handleRecord(rec []byte, seg int, sendable bool, c *chunk) {
	typ := q.dec.Type(rec)
	var err error
	switch typ {
	case record.Series:
		q.bufSeries, err = q.dec.Series(rec, q.bufSeries[:0])
		if err != nil {
			q.decodeErr(typ, err)
			return
		}
		q.storeSeries(q.bufSeries, seg)
		clear(q.bufSeries)

	case record.Samples, record.SamplesV2:
		if !sendable {
			return
		}
		q.bufSamples, err = q.dec.Samples(rec, q.bufSamples[:0])
		if err != nil {
			q.decodeErr(typ, err)
			return
		}
		maxT := int64(math.MinInt64)
		dropped := func(r string) { q.m.samplesDropped.WithLabelValues(r).Inc() }
		for _, s := range q.bufSamples {
			maxT = max(maxT, s.T)
			lbls, ok := q.lookup(s.Ref, dropped)
			if !ok {
				continue
			}
			if q.addItem(c, item{ref: s.Ref, kind: kindSample, t: s.T, v: s.V, lbls: lbls}) {
				c.samples++
			}
		}
		q.observeRead(maxT, len(q.bufSamples))

	case record.HistogramSamples, record.CustomBucketsHistogramSamples, record.HistogramSamplesV2:
		if !sendable || !q.s.sendHistograms {
			return
		}
		q.bufHist, err = q.dec.HistogramSamples(rec, q.bufHist[:0])
		if err != nil {
			q.decodeErr(typ, err)
			return
		}
		maxT := int64(math.MinInt64)
		dropped := func(r string) { q.m.histogramsDropped.WithLabelValues(r).Inc() }
		for _, h := range q.bufHist {
			maxT = max(maxT, h.T)
			lbls, ok := q.lookup(h.Ref, dropped)
			if !ok {
				continue
			}
			if q.addItem(c, item{ref: h.Ref, kind: kindHistogram, t: h.T, x: &itemExtra{h: h.H}, lbls: lbls}) {
				c.histograms++
			}
		}
		q.observeRead(maxT, len(q.bufHist))
		clear(q.bufHist)

	case record.FloatHistogramSamples, record.CustomBucketsFloatHistogramSamples, record.FloatHistogramSamplesV2:
		if !sendable || !q.s.sendHistograms {
			return
		}
		q.bufFHist, err = q.dec.FloatHistogramSamples(rec, q.bufFHist[:0])
		if err != nil {
			q.decodeErr(typ, err)
			return
		}
		maxT := int64(math.MinInt64)
		dropped := func(r string) { q.m.histogramsDropped.WithLabelValues(r).Inc() }
		for _, h := range q.bufFHist {
			maxT = max(maxT, h.T)
			lbls, ok := q.lookup(h.Ref, dropped)
			if !ok {
				continue
			}
			if q.addItem(c, item{ref: h.Ref, kind: kindFloatHistogram, t: h.T, x: &itemExtra{fh: h.FH}, lbls: lbls}) {
				c.histograms++
			}
		}
		q.observeRead(maxT, len(q.bufFHist))
		clear(q.bufFHist)

	case record.Exemplars:
		if !sendable || !q.s.sendExemplars {
			return
		}
		q.bufEx, err = q.dec.Exemplars(rec, q.bufEx[:0])
		if err != nil {
			q.decodeErr(typ, err)
			return
		}
		dropped := func(r string) { q.m.exemplarsDropped.WithLabelValues(r).Inc() }
		for _, e := range q.bufEx {
			lbls, ok := q.lookup(e.Ref, dropped)
			if !ok {
				continue
			}
			if q.addItem(c, item{ref: e.Ref, kind: kindExemplar, t: e.T, v: e.V, lbls: lbls, x: &itemExtra{exLbls: e.Labels}}) {
				c.exemplars++
			}
		}
		clear(q.bufEx)

	case record.Metadata:
		if !q.s.sendMetadata {
			return
		}
		q.bufMeta, err = q.dec.Metadata(rec, q.bufMeta[:0])
		if err != nil {
			q.decodeErr(typ, err)
			return
		}
		for _, md := range q.bufMeta {
			e, ok := q.series.get(md.Ref)
			if !ok || e.dropped {
				continue
			}
			if q.s.v2 {
				if q.seriesMeta == nil {
					q.seriesMeta = map[chunks.HeadSeriesRef]*seriesMeta{}
				}
				q.seriesMeta[md.Ref] = newSeriesMeta(md)
				continue
			}
			mm := metricFamilyMetadata(e.lbls, md)
			q.metaCache.set(mm)
			if sendable {
				c.addMetadata(mm)
			}
		}

	case record.Unknown:
		q.m.walReadErrors.Inc()

	default:
		// Tombstones, mmap markers, min-valid-time: nothing to send.
	}
}

// observeRead records the highest timestamp t of the n samples of a record
// (once per record: the gauges take a lock).
func (q *queue) observeRead(t int64, n int) {
	if n == 0 {
		return
	}
	sec := float64(t) / 1000
	q.m.highestRead.set(sec)
	q.m.parent.observeHighest(sec)
}

func (c *chunk) add(it item) {
	if c.n() == 0 {
		c.first = time.Now()
	}
	if it.group() != 0 {
		c.inFlight++
	}
	c.items = append(c.items, it)
}

func (c *chunk) addMetadata(md prompb.MetricMetadata) {
	for _, o := range c.metadata {
		if o.MetricFamilyName == md.MetricFamilyName {
			return
		}
	}
	if c.n() == 0 {
		c.first = time.Now()
	}
	c.metadata = append(c.metadata, md)
}

// metricFamilyMetadata turns a WAL metadata record into remote-write 1.0
// metadata, keyed by metric family (the series name without the suffixes
// that classic histograms and summaries add).
func metricFamilyMetadata(lbls labels.Labels, md record.RefMetadata) prompb.MetricMetadata {
	mt := record.ToMetricType(md.Type)
	name := lbls.Get(labels.MetricName)
	switch mt {
	case "histogram", "gaugehistogram", "summary":
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if s, ok := strings.CutSuffix(name, suf); ok {
				name = s
				break
			}
		}
	}
	return prompb.MetricMetadata{
		Type:             prompb.FromMetadataType(mt),
		MetricFamilyName: name,
		Help:             md.Help,
		Unit:             md.Unit,
	}
}
