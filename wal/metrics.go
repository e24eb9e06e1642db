package wal

import (
	"os"
	"path/filepath"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/internal/promreg"
)

type metrics struct {
	collectors []prometheus.Collector
	group      *promreg.Group

	replayDuration      prometheus.Gauge
	corruptionsRepaired prometheus.Counter
	samplesAppended     *prometheus.CounterVec
	appendedFloat       prometheus.Counter
	appendedHistogram   prometheus.Counter
	appendedExemplar    prometheus.Counter
	outOfOrder          prometheus.Counter
	rejected            *prometheus.CounterVec
	commits             prometheus.Counter
	writeFailures       prometheus.Counter
	truncations         prometheus.Counter
	truncationFailures  prometheus.Counter
	checkpointFailures  prometheus.Counter
	droppedUnsent       prometheus.Counter
	droppedUnsentBytes  prometheus.Counter
	seriesCreated       prometheus.Counter
	seriesGC            prometheus.Counter
	reopens             prometheus.Counter
}

// Reasons for shoal_wal_rejected_samples_total.
const (
	rejectDuplicate = "duplicate"
	rejectTooOld    = "too_old"
	rejectInvalid   = "invalid"
	// rejectUnwritable: refused because an earlier write failed and the WAL
	// could not be reopened yet (disk full, read-only file system).
	rejectUnwritable = "unwritable"
)

func newMetrics(s *Storage, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		m.collectors = append(m.collectors, c)
		return c
	}
	m.replayDuration = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shoal_wal_replay_duration_seconds",
		Help: "Time the last WAL replay on open took.",
	})
	m.samplesAppended = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_wal_samples_appended_total",
		Help: "Samples committed to the WAL, by type (float, histogram, exemplar).",
	}, []string{"type"})
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_wal_rejected_samples_total",
		Help: "Samples refused for a reason other than order: duplicate (same timestamp, different value), too_old (older than the WAL max age), invalid (bad labels or histogram), unwritable (on commit, while the WAL cannot be written after a failed write).",
	}, []string{"reason"})
	m.collectors = append(m.collectors, m.replayDuration, m.samplesAppended, m.rejected)
	m.appendedFloat = m.samplesAppended.WithLabelValues("float")
	m.appendedHistogram = m.samplesAppended.WithLabelValues("histogram")
	m.appendedExemplar = m.samplesAppended.WithLabelValues("exemplar")
	for _, r := range []string{rejectDuplicate, rejectTooOld, rejectInvalid, rejectUnwritable} {
		m.rejected.WithLabelValues(r)
	}

	m.corruptionsRepaired = counter("shoal_wal_corruptions_repaired_total", "Corrupt or torn WAL tails found on open and repaired (the records before the damage are kept).")
	m.outOfOrder = counter("shoal_wal_out_of_order_samples_total", "Samples refused because they are older than the newest sample of their series.")
	m.commits = counter("shoal_wal_commits_total", "Commits that wrote records to the WAL.")
	m.writeFailures = counter("shoal_wal_write_failures_total", "Commits that failed to write to the WAL (their samples are lost and the error is returned to the appender).")
	m.truncations = counter("shoal_wal_truncations_total", "Truncation passes that deleted segments.")
	m.truncationFailures = counter("shoal_wal_truncation_failures_total", "Truncation passes that failed.")
	m.checkpointFailures = counter("shoal_wal_checkpoint_failures_total", "Checkpoints that could not be written (no segment is deleted then).")
	m.droppedUnsent = counter("shoal_wal_segments_dropped_unsent_total", "Segments deleted while a reader still needed them, because they were older than the max age or the WAL was over its max size.")
	m.droppedUnsentBytes = counter("shoal_wal_bytes_dropped_unsent_total", "Bytes of the segments counted in shoal_wal_segments_dropped_unsent_total.")
	m.seriesCreated = counter("shoal_wal_series_created_total", "Series created in the WAL.")
	m.reopens = counter("shoal_wal_write_recoveries_total", "Times the WAL became writable again after a failed write: the failed batch's torn record cut away and a new segment started.")
	m.seriesGC = counter("shoal_wal_series_gc_total", "Series forgotten because they had no sample for the series GC age.")

	m.collectors = append(m.collectors,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shoal_wal_series",
			Help: "Series currently known to the WAL.",
		}, func() float64 { return float64(s.numSeries.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shoal_wal_segments",
			Help: "Segment files in the WAL directory (checkpoints not included).",
		}, func() float64 { n, _ := dirUsage(s.dir); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shoal_wal_bytes",
			Help: "Bytes on disk used by WAL segments and checkpoints.",
		}, func() float64 { _, b := dirUsage(s.dir); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shoal_wal_writable",
			Help: "0 after a write to the WAL failed (disk full, read-only file system) until it could be reopened: commits are refused meanwhile; 1 otherwise.",
		}, func() float64 {
			if s.unwritable.Load() {
				return 0
			}
			return 1
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shoal_wal_segment_current",
			Help: "Index of the segment being written.",
		}, func() float64 { return float64(s.liveSegment.Load()) }),
	)

	g, err := promreg.Register(reg, m.collectors...)
	if err != nil {
		return nil, err
	}
	m.group = g
	return m, nil
}

func (m *metrics) unregister() { m.group.Unregister() }

// dirUsage counts the segment files in dir and the bytes of segments and
// checkpoints. Errors count as zero: the metric must never fail a scrape.
func dirUsage(dir string) (segments int, bytes int64) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			sub, err := os.ReadDir(filepath.Join(dir, name))
			if err != nil {
				continue
			}
			for _, f := range sub {
				if info, err := f.Info(); err == nil && !f.IsDir() {
					bytes += info.Size()
				}
			}
			continue
		}
		if _, err := strconv.Atoi(name); err != nil {
			continue
		}
		segments++
		if info, err := e.Info(); err == nil {
			bytes += info.Size()
		}
	}
	return segments, bytes
}
