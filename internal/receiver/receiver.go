// Package receiver is a remote-write receiver backed by a real Prometheus
// TSDB: the thing shoal's tests, `make demo` and `make bench` send to.
//
// Writes go through Prometheus' own remote-write handler
// (storage/remote.NewWriteHandler, Remote-Write 1.0 and 2.0) into a
// tsdb.DB with out-of-order ingestion disabled, so a sample older than the
// newest one of its series is rejected and counted, exactly as a stock
// Prometheus receiver would do. Reads go through the PromQL engine (HTTP) or
// the Series/Samples helpers (Go).
//
// The TSDB head only accepts samples newer than its newest sample minus one
// hour (half the 2h block range): tests should use timestamps near time.Now.
package receiver

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/util/compression"
)

const (
	// Retention is how long the receiver keeps data: enough for a demo or a
	// benchmark run, small enough that a long run does not fill the disk.
	Retention = 6 * time.Hour

	// queryTimeout bounds one PromQL evaluation.
	queryTimeout = 2 * time.Minute
	// maxQuerySamples bounds the samples one query may load into memory.
	maxQuerySamples = 50_000_000
	// handlerLogsPerSecond caps what Prometheus' write handler may log, since
	// it logs once per rejected sample.
	handlerLogsPerSecond = 5
)

// Receiver is a remote-write endpoint storing into a local TSDB. It is safe
// for concurrent use. Create it with New and release it with Close.
type Receiver struct {
	dir    string
	logger *slog.Logger
	db     *tsdb.DB
	reg    *prometheus.Registry
	engine *promql.Engine
	parser parser.Parser
	counts *appendCounters
	logLim *limitState
	start  time.Time

	handler http.Handler
}

// New opens (or creates) a TSDB in dir and returns a Receiver serving it.
// A nil logger discards logs. The TSDB keeps data for Retention, compresses
// its WAL with snappy and never accepts out-of-order samples.
func New(dir string, logger *slog.Logger) (*Receiver, error) {
	if logger == nil {
		logger = promslog.NewNopLogger()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)

	opts := tsdb.DefaultOptions()
	opts.RetentionDuration = Retention.Milliseconds()
	opts.MinBlockDuration = tsdb.DefaultBlockDuration
	opts.MaxBlockDuration = tsdb.DefaultBlockDuration
	opts.WALCompression = compression.Snappy
	// Out-of-order ingestion stays off: shoal's tests assert that hand-offs
	// never produce out-of-order samples, and a window would hide them.
	opts.OutOfOrderTimeWindow = 0
	db, err := tsdb.Open(dir, logger.With("component", "tsdb"), reg, opts, nil)
	if err != nil {
		return nil, fmt.Errorf("open TSDB in %q: %w", dir, err)
	}

	r := &Receiver{
		dir:    dir,
		logger: logger,
		db:     db,
		reg:    reg,
		parser: parser.NewParser(parser.Options{}),
		counts: &appendCounters{},
		start:  time.Now(),
	}
	r.engine = promql.NewEngine(promql.EngineOpts{
		Logger:               logger.With("component", "query engine"),
		Reg:                  reg,
		MaxSamples:           maxQuerySamples,
		Timeout:              queryTimeout,
		EnableAtModifier:     true,
		EnableNegativeOffset: true,
		Parser:               r.parser,
	})
	r.registerMetrics()

	handlerLogger, lim := newLimitedLogger(logger.With("component", "remote write handler"), handlerLogsPerSecond)
	r.logLim = lim
	write := remote.NewWriteHandler(
		handlerLogger, reg,
		countingAppendable{next: db, c: r.counts},
		remoteapi.MessageTypes{remoteapi.WriteV1MessageType, remoteapi.WriteV2MessageType},
		false, // no __type__/__unit__ labels from metadata: keep series as sent
		true,  // pass metadata on (the TSDB drops it unless metadata WAL records are on)
	)
	r.handler = r.routes(write)
	return r, nil
}

// Close stops the query engine and closes the TSDB (flushing nothing: the
// WAL already holds every committed sample).
func (r *Receiver) Close() error {
	return errors.Join(r.engine.Close(), r.db.Close())
}

// Handler serves the receiver's HTTP API:
//
//	POST /api/v1/write        Remote-Write 1.0 and 2.0
//	GET  /api/v1/query        PromQL instant query (Prometheus JSON)
//	GET  /api/v1/query_range  PromQL range query (Prometheus JSON)
//	GET  /api/v1/series       label sets matching match[] selectors
//	GET  /metrics             the receiver's own metrics (TSDB, write handler, ingestion)
//	GET  /-/healthy, /-/ready 200 while the receiver is open
//	GET  /                    a short status page
func (r *Receiver) Handler() http.Handler { return r.handler }

// Dir is the TSDB directory.
func (r *Receiver) Dir() string { return r.dir }

// registerMetrics exposes the append counters. They are read straight from
// the atomics so that Stats and /metrics can never disagree.
func (r *Receiver) registerMetrics() {
	c := r.counts
	counter := func(name, help string, v func() uint64, constLabels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "shoal_receiver", Name: name, Help: help, ConstLabels: constLabels,
		}, func() float64 { return float64(v()) })
	}
	rejected := func(reason string, v func() uint64) prometheus.Collector {
		return counter("samples_rejected_total",
			"Samples (floats and histograms) the TSDB rejected while the write handler appended them, by reason.",
			v, prometheus.Labels{"reason": reason})
	}
	r.reg.MustRegister(
		counter("samples_accepted_total",
			"Samples (floats and histograms) appended and committed through the write handler.",
			c.accepted.Load, nil),
		counter("histograms_accepted_total",
			"Histogram samples appended and committed through the write handler.",
			c.histograms.Load, nil),
		counter("samples_rolled_back_total",
			"Samples appended, then discarded because their write request failed as a whole.",
			c.rolledBack.Load, nil),
		rejected("out_of_order", c.outOfOrder.Load),
		rejected("out_of_bounds", c.outOfBounds.Load),
		rejected("too_old", c.tooOld.Load),
		rejected("duplicate", c.duplicate.Load),
		rejected("invalid", c.invalid.Load),
		counter("log_messages_suppressed_total",
			"Write handler log lines dropped by the receiver's rate limit.",
			func() uint64 { return r.logLim.suppressed.Load() }, nil),
	)
}

// Stats counts what the receiver ingested since it was opened.
type Stats struct {
	// Series is the number of series in the TSDB head.
	Series uint64
	// Accepted counts samples (floats and histograms) the write handler
	// appended and committed.
	Accepted uint64
	// Histograms counts the histogram samples among Accepted.
	Histograms uint64
	// Stored counts samples the TSDB head actually stored
	// (prometheus_tsdb_head_samples_appended_total). It is Accepted minus
	// Dropped minus rejections the TSDB found only at commit.
	Stored uint64
	// Dropped counts samples accepted but silently not stored: exact
	// duplicates (same timestamp and value as the series' newest sample),
	// and the rare same-timestamp conflict the TSDB only sees at commit.
	Dropped uint64
	// OutOfOrder counts samples rejected for being older than the newest
	// sample of their series (prometheus_tsdb_out_of_order_samples_total,
	// which includes rejections found at commit).
	OutOfOrder uint64
	// TooOld counts samples rejected for being older than the head accepts
	// at all (prometheus_tsdb_out_of_bound_samples_total plus
	// prometheus_tsdb_too_old_samples_total).
	TooOld uint64
	// Duplicate counts samples rejected for having the timestamp of the
	// series' newest sample but a different value.
	Duplicate uint64
	// Invalid counts samples rejected for any other reason (for example an
	// invalid native histogram).
	Invalid uint64
	// RolledBack counts samples that were appended but discarded because
	// their request failed: a Remote-Write 1.0 request fails as a whole on
	// its first rejected sample.
	RolledBack uint64
}

// Rejected is the number of samples the TSDB refused.
func (s Stats) Rejected() uint64 { return s.OutOfOrder + s.TooOld + s.Duplicate + s.Invalid }

// Stats returns the ingestion counters. Samples more than ten minutes in
// the future are refused by the write handler before they reach storage;
// they show up only as 400 responses.
//
// Stats may be read while writes go on: a commit counts in the TSDB head
// before it counts in Accepted, so Accepted is read before the head's
// counters, and the read is repeated until no commit ended between the
// two. A commit still in flight then shows in Stored only and can hide a
// drop for one read, but never counts as one.
func (r *Receiver) Stats() Stats {
	var s Stats
	for range 10 {
		before := r.counts.accepted.Load()
		s = r.readStats(before)
		if r.counts.accepted.Load() == before {
			break
		}
	}
	return s
}

// readStats reads the head's counters and derives Stats with accepted as
// the number of committed samples.
func (r *Receiver) readStats(accepted uint64) Stats {
	c := r.counts
	appendOOO, appendOld := c.outOfOrder.Load(), c.outOfBounds.Load()+c.tooOld.Load()
	s := Stats{
		Accepted:   accepted,
		Histograms: c.histograms.Load(),
		Duplicate:  c.duplicate.Load(),
		Invalid:    c.invalid.Load(),
		RolledBack: c.rolledBack.Load(),
	}
	heads := r.headCounters()
	s.Series = r.db.Head().NumSeries()
	s.Stored = uint64(heads["prometheus_tsdb_head_samples_appended_total"])
	// The head counts rejections both while appending and at commit; ours
	// only while appending. The difference is what commit refused.
	s.OutOfOrder = max(appendOOO, uint64(heads["prometheus_tsdb_out_of_order_samples_total"]))
	s.TooOld = max(appendOld, uint64(heads["prometheus_tsdb_out_of_bound_samples_total"]+heads["prometheus_tsdb_too_old_samples_total"]))

	accounted := s.Stored + (s.OutOfOrder - appendOOO) + (s.TooOld - appendOld)
	if s.Accepted > accounted {
		s.Dropped = s.Accepted - accounted
	}
	return s
}

// headCounters sums the TSDB head's sample counters Stats derives from.
func (r *Receiver) headCounters() map[string]float64 {
	mfs, err := r.reg.Gather()
	if err != nil {
		r.logger.Warn("Gathering TSDB metrics for stats", "err", err)
	}
	sums := map[string]float64{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "prometheus_tsdb_head_samples_appended_total",
			"prometheus_tsdb_out_of_order_samples_total",
			"prometheus_tsdb_out_of_bound_samples_total",
			"prometheus_tsdb_too_old_samples_total":
			for _, m := range mf.GetMetric() {
				sums[mf.GetName()] += m.GetCounter().GetValue()
			}
		}
	}
	return sums
}
