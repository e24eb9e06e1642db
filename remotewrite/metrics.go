package remotewrite

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/internal/promreg"
)

const (
	promNamespace = "prometheus"
	promSubsystem = "remote_storage"

	labelRemoteName = "remote_name"
	labelURL        = "url"
	labelReason     = "reason"

	// Reasons for prometheus_remote_storage_{samples,histograms,exemplars}_dropped_total.
	reasonDroppedSeries = "dropped_series"                 // write_relabel_configs dropped the series
	reasonUnknownSeries = "unintentionally_dropped_series" // no series record known for the ref

	// Outcomes of shoal_remotewrite_resent_samples_total (after a restart).
	resendSkipped   = "skipped_acknowledged" // settled before the crash: not sent again
	resendDelivered = "delivered"            // in flight at the crash, sent alone, accepted
	resendRefused   = "refused_as_present"   // in flight at the crash, refused: the receiver had it
)

// metrics holds every collector of the package. Per-queue series are children
// of vectors labelled {remote_name, url}; they are deleted when a queue goes
// away on reload, so a registry never keeps series of queues that no longer
// exist, and re-adding a queue never hits a duplicate registration.
type metrics struct {
	samplesTotal, samplesFailed, samplesRetried          *prometheus.CounterVec
	histogramsTotal, histogramsFailed, histogramsRetried *prometheus.CounterVec
	exemplarsTotal, exemplarsFailed, exemplarsRetried    *prometheus.CounterVec
	metadataTotal, metadataFailed, metadataRetried       *prometheus.CounterVec
	samplesDropped, histogramsDropped, exemplarsDropped  *prometheus.CounterVec

	samplesPending, histogramsPending, exemplarsPending *prometheus.GaugeVec

	queueHighestRead, queueHighestSent *prometheus.GaugeVec
	shards, shardsMin, shardsMax       *prometheus.GaugeVec
	shardsDesired, shardCapacity       *prometheus.GaugeVec
	maxSamplesPerSend                  *prometheus.GaugeVec
	sentBatchDuration                  *prometheus.HistogramVec
	bytesTotal                         *prometheus.CounterVec

	// highestTimestamp is Prometheus' unlabelled
	// prometheus_remote_storage_highest_timestamp_in_seconds. It stays
	// unlabelled so the standard alert
	//   highest_timestamp_in_seconds - ignoring(remote_name, url) group_right queue_highest_sent_timestamp_seconds
	// keeps working with any number of queues.
	highestTimestamp  prometheus.Gauge
	highestMtx        sync.Mutex
	highestTimestampV float64

	progressSegment  *prometheus.GaugeVec
	progressOffset   *prometheus.GaugeVec
	segmentsSkipped  *prometheus.CounterVec
	walReadErrors    *prometheus.CounterVec
	progressWriteErr *prometheus.CounterVec
	seriesCached     *prometheus.GaugeVec
	paused           *prometheus.GaugeVec // {remote_name, reason}

	sendDropped *prometheus.CounterVec // {remote_name, url, reason}
	retries     *prometheus.CounterVec // {remote_name, url, reason}
	resent      *prometheus.CounterVec // {remote_name, outcome}

	group *promreg.Group
}

// newMetrics builds the package's collectors and registers them with reg (a
// nil reg registers nothing). A registration error unregisters what was
// already registered and is returned: two Managers on one registry are a
// wiring mistake. The unlabelled highest-timestamp gauge is the exception:
// when the name is already exported, that gauge is fed instead.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	qLabels := []string{labelRemoteName, labelURL}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: promNamespace, Subsystem: promSubsystem, Name: name, Help: help,
		}, append(append([]string{}, qLabels...), extra...))
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: promNamespace, Subsystem: promSubsystem, Name: name, Help: help,
		}, qLabels)
	}
	// shoal's own per-queue metrics are labelled by remote_name only.
	shoalGauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{labelRemoteName})
	}
	shoalCounter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{labelRemoteName})
	}
	m := &metrics{
		samplesTotal:      counter("samples_total", "Total number of samples sent to remote storage."),
		samplesFailed:     counter("samples_failed_total", "Total number of samples which failed on send to remote storage, non-recoverable errors."),
		samplesRetried:    counter("samples_retried_total", "Total number of samples which failed on send to remote storage but were retried because the send error was recoverable."),
		histogramsTotal:   counter("histograms_total", "Total number of histograms sent to remote storage."),
		histogramsFailed:  counter("histograms_failed_total", "Total number of histograms which failed on send to remote storage, non-recoverable errors."),
		histogramsRetried: counter("histograms_retried_total", "Total number of histograms which failed on send to remote storage but were retried because the send error was recoverable."),
		exemplarsTotal:    counter("exemplars_total", "Total number of exemplars sent to remote storage."),
		exemplarsFailed:   counter("exemplars_failed_total", "Total number of exemplars which failed on send to remote storage, non-recoverable errors."),
		exemplarsRetried:  counter("exemplars_retried_total", "Total number of exemplars which failed on send to remote storage but were retried because the send error was recoverable."),
		metadataTotal:     counter("metadata_total", "Total number of metadata entries sent to remote storage."),
		metadataFailed:    counter("metadata_failed_total", "Total number of metadata entries which failed on send to remote storage, non-recoverable errors."),
		metadataRetried:   counter("metadata_retried_total", "Total number of metadata entries which failed on send to remote storage but were retried because the send error was recoverable."),
		samplesDropped:    counter("samples_dropped_total", "Total number of samples which were dropped after being read from the WAL before being sent via remote write, either via relabelling, due to being too old or unintentionally because of an unknown reference ID.", labelReason),
		histogramsDropped: counter("histograms_dropped_total", "Total number of histograms which were dropped after being read from the WAL before being sent via remote write, either via relabelling, due to being too old or unintentionally because of an unknown reference ID.", labelReason),
		exemplarsDropped:  counter("exemplars_dropped_total", "Total number of exemplars which were dropped after being read from the WAL before being sent via remote write, either via relabelling, due to being too old or unintentionally because of an unknown reference ID.", labelReason),
		samplesPending:    gauge("samples_pending", "The number of samples pending in the queues shards to be sent to the remote storage."),
		histogramsPending: gauge("histograms_pending", "The number of histograms pending in the queues shards to be sent to the remote storage."),
		exemplarsPending:  gauge("exemplars_pending", "The number of exemplars pending in the queues shards to be sent to the remote storage."),
		queueHighestRead:  gauge("queue_highest_timestamp_seconds", "Highest timestamp that was read from the WAL by the queue, in seconds since epoch. Initialized to 0 when no data has been read yet."),
		queueHighestSent:  gauge("queue_highest_sent_timestamp_seconds", "Highest timestamp successfully sent by this queue, in seconds since epoch. Initialized to 0 when no data has been sent yet."),
		shards:            gauge("shards", "The number of shards used for parallel sending to the remote storage."),
		shardsMin:         gauge("shards_min", "The minimum number of shards that the queue is allowed to run."),
		shardsMax:         gauge("shards_max", "The maximum number of shards that the queue is allowed to run."),
		shardsDesired:     gauge("shards_desired", "The number of shards the queue will use for its next round."),
		shardCapacity:     gauge("shard_capacity", "The capacity of each shard of the queue used for parallel sending to the remote storage."),
		maxSamplesPerSend: gauge("max_samples_per_send", "The maximum number of samples to be sent, in a single request, to the remote storage."),
		sentBatchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: promNamespace, Subsystem: promSubsystem,
			Name:    "sent_batch_duration_seconds",
			Help:    "Duration of send calls to the remote storage.",
			Buckets: append(prometheus.DefBuckets, 25, 60, 120, 300),
		}, qLabels),
		bytesTotal: counter("bytes_total", "The total number of bytes of data (not metadata) sent by the queue after compression, counting every attempt."),
		highestTimestamp: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: promNamespace, Subsystem: promSubsystem,
			Name: "highest_timestamp_in_seconds",
			Help: "Highest timestamp read from the WAL by any remote-write queue, in seconds since epoch.",
		}),
		progressSegment: shoalGauge("shoal_remotewrite_progress_segment",
			"WAL segment of the durable remote-write progress: every record before this position is acknowledged or deliberately dropped."),
		progressOffset: shoalGauge("shoal_remotewrite_progress_offset_bytes",
			"Byte offset within shoal_remotewrite_progress_segment of the durable remote-write progress."),
		segmentsSkipped: shoalCounter("shoal_remotewrite_segments_skipped_total",
			"WAL segments the queue never read because they were deleted (or corrupt) before it got to them."),
		walReadErrors: shoalCounter("shoal_remotewrite_wal_read_errors_total",
			"Errors reading or decoding the WAL (corrupt records, unreadable segments)."),
		progressWriteErr: shoalCounter("shoal_remotewrite_progress_write_failures_total",
			"Failed attempts to persist (or read) the progress file."),
		seriesCached: shoalGauge("shoal_remotewrite_series_cached",
			"Series whose labels the queue holds in memory (forgotten when a WAL checkpoint drops them)."),
		paused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shoal_remotewrite_queue_paused",
			Help: "1 while the queue holds its backlog in the WAL after the receiver refused it (failure_policy durable): reason auth (401, 403; resent when the credentials files change or at the next probe) or not_found (404; resent at the next probe).",
		}, []string{labelRemoteName, labelReason}),
		sendDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_remotewrite_samples_dropped_total",
			Help: "Samples and histograms dropped because the receiver called them bad data (reason bad_request: 400, conflict: 409, unprocessable: 422, too_large: 413 after one split or for a single item; with failure_policy spec also unauthorized: 401, forbidden: 403, not_found: 404, request_timeout: 408, client_error: any other 4xx but 429) or because they could not be encoded. Also counted in prometheus_remote_storage_samples_failed_total / histograms_failed_total.",
		}, []string{labelRemoteName, labelURL, labelReason}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_remotewrite_retries_total",
			Help: "Requests retried, by reason: the HTTP status (3xx included: a redirect that would turn the POST into a GET is not followed), or, without an answer, timeout (remote_timeout passed), tls (handshake or certificate) or network (refused, reset, closed).",
		}, []string{labelRemoteName, labelURL, labelReason}),
		resent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_remotewrite_resent_samples_total",
			Help: "Samples and histograms read again after a restart: skipped_acknowledged (the receiver acknowledged them before the crash), delivered or refused_as_present (in flight at the crash, sent alone again).",
		}, []string{labelRemoteName, "outcome"}),
	}
	if reg == nil {
		return m, nil
	}
	// The unlabelled highest-timestamp gauge first: when someone else
	// already exports the name, feed that gauge (and leave it to its owner).
	g, err := promreg.Register(reg, m.highestTimestamp)
	if err != nil {
		var are prometheus.AlreadyRegisteredError
		existing, ok := prometheus.Gauge(nil), false
		if errors.As(err, &are) {
			existing, ok = are.ExistingCollector.(prometheus.Gauge)
		}
		if !ok {
			return nil, fmt.Errorf("remote-write metrics: %w", err)
		}
		m.highestTimestamp = existing
		g, _ = promreg.Register(reg) // an empty group cannot fail
	}
	if err := g.Add(
		m.samplesTotal, m.samplesFailed, m.samplesRetried,
		m.histogramsTotal, m.histogramsFailed, m.histogramsRetried,
		m.exemplarsTotal, m.exemplarsFailed, m.exemplarsRetried,
		m.metadataTotal, m.metadataFailed, m.metadataRetried,
		m.samplesDropped, m.histogramsDropped, m.exemplarsDropped,
		m.samplesPending, m.histogramsPending, m.exemplarsPending,
		m.queueHighestRead, m.queueHighestSent,
		m.shards, m.shardsMin, m.shardsMax, m.shardsDesired, m.shardCapacity, m.maxSamplesPerSend,
		m.sentBatchDuration, m.bytesTotal,
		m.progressSegment, m.progressOffset, m.segmentsSkipped, m.walReadErrors, m.progressWriteErr, m.seriesCached,
		m.paused, m.sendDropped, m.retries, m.resent,
	); err != nil {
		return nil, fmt.Errorf("remote-write metrics: %w", err)
	}
	m.group = g
	return m, nil
}

// unregister removes every collector newMetrics registered.
func (m *metrics) unregister() { m.group.Unregister() }

// observeHighest raises the unlabelled highest timestamp gauge, never lowers it.
func (m *metrics) observeHighest(seconds float64) {
	m.highestMtx.Lock()
	defer m.highestMtx.Unlock()
	if seconds > m.highestTimestampV {
		m.highestTimestampV = seconds
		m.highestTimestamp.Set(seconds)
	}
}

// deleteQueue removes every series of one queue.
func (m *metrics) deleteQueue(name string) {
	l := prometheus.Labels{labelRemoteName: name}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		m.samplesTotal, m.samplesFailed, m.samplesRetried,
		m.histogramsTotal, m.histogramsFailed, m.histogramsRetried,
		m.exemplarsTotal, m.exemplarsFailed, m.exemplarsRetried,
		m.metadataTotal, m.metadataFailed, m.metadataRetried,
		m.samplesDropped, m.histogramsDropped, m.exemplarsDropped,
		m.samplesPending, m.histogramsPending, m.exemplarsPending,
		m.queueHighestRead, m.queueHighestSent,
		m.shards, m.shardsMin, m.shardsMax, m.shardsDesired, m.shardCapacity, m.maxSamplesPerSend,
		m.sentBatchDuration, m.bytesTotal,
		m.progressSegment, m.progressOffset, m.segmentsSkipped, m.walReadErrors, m.progressWriteErr, m.seriesCached,
		m.paused, m.sendDropped, m.retries, m.resent,
	} {
		v.DeletePartialMatch(l)
	}
}

// queueMetrics are one queue's children of the vectors above.
type queueMetrics struct {
	parent *metrics

	samplesTotal, samplesFailed, samplesRetried          prometheus.Counter
	histogramsTotal, histogramsFailed, histogramsRetried prometheus.Counter
	exemplarsTotal, exemplarsFailed, exemplarsRetried    prometheus.Counter
	metadataTotal, metadataFailed, metadataRetried       prometheus.Counter
	samplesDropped, histogramsDropped, exemplarsDropped  *prometheus.CounterVec

	samplesPending, histogramsPending, exemplarsPending prometheus.Gauge

	highestRead, highestSent               *maxGauge
	shards, shardsMin, shardsMax           prometheus.Gauge
	shardsDesired, shardCap, maxPerSend    prometheus.Gauge
	sentBatchDuration                      prometheus.Observer
	bytesTotal                             prometheus.Counter
	progressSegment, progressOffset        prometheus.Gauge
	segmentsSkipped, walReadErrors, pwErrs prometheus.Counter
	seriesCached                           prometheus.Gauge
	paused                                 *prometheus.GaugeVec // {reason}
	sendDropped, retries, resent           *prometheus.CounterVec
}

func (m *metrics) forQueue(name, url string) *queueMetrics {
	l := []string{name, url}
	paused := m.paused.MustCurryWith(prometheus.Labels{labelRemoteName: name})
	for _, r := range pauseReasons {
		paused.WithLabelValues(r).Set(0)
	}
	return &queueMetrics{
		paused:            paused,
		parent:            m,
		samplesTotal:      m.samplesTotal.WithLabelValues(l...),
		samplesFailed:     m.samplesFailed.WithLabelValues(l...),
		samplesRetried:    m.samplesRetried.WithLabelValues(l...),
		histogramsTotal:   m.histogramsTotal.WithLabelValues(l...),
		histogramsFailed:  m.histogramsFailed.WithLabelValues(l...),
		histogramsRetried: m.histogramsRetried.WithLabelValues(l...),
		exemplarsTotal:    m.exemplarsTotal.WithLabelValues(l...),
		exemplarsFailed:   m.exemplarsFailed.WithLabelValues(l...),
		exemplarsRetried:  m.exemplarsRetried.WithLabelValues(l...),
		metadataTotal:     m.metadataTotal.WithLabelValues(l...),
		metadataFailed:    m.metadataFailed.WithLabelValues(l...),
		metadataRetried:   m.metadataRetried.WithLabelValues(l...),
		samplesDropped:    m.samplesDropped.MustCurryWith(prometheus.Labels{labelRemoteName: name, labelURL: url}),
		histogramsDropped: m.histogramsDropped.MustCurryWith(prometheus.Labels{labelRemoteName: name, labelURL: url}),
		exemplarsDropped:  m.exemplarsDropped.MustCurryWith(prometheus.Labels{labelRemoteName: name, labelURL: url}),
		samplesPending:    m.samplesPending.WithLabelValues(l...),
		histogramsPending: m.histogramsPending.WithLabelValues(l...),
		exemplarsPending:  m.exemplarsPending.WithLabelValues(l...),
		highestRead:       &maxGauge{g: m.queueHighestRead.WithLabelValues(l...)},
		highestSent:       &maxGauge{g: m.queueHighestSent.WithLabelValues(l...)},
		shards:            m.shards.WithLabelValues(l...),
		shardsMin:         m.shardsMin.WithLabelValues(l...),
		shardsMax:         m.shardsMax.WithLabelValues(l...),
		shardsDesired:     m.shardsDesired.WithLabelValues(l...),
		shardCap:          m.shardCapacity.WithLabelValues(l...),
		maxPerSend:        m.maxSamplesPerSend.WithLabelValues(l...),
		sentBatchDuration: m.sentBatchDuration.WithLabelValues(l...),
		bytesTotal:        m.bytesTotal.WithLabelValues(l...),
		progressSegment:   m.progressSegment.WithLabelValues(name),
		progressOffset:    m.progressOffset.WithLabelValues(name),
		segmentsSkipped:   m.segmentsSkipped.WithLabelValues(name),
		walReadErrors:     m.walReadErrors.WithLabelValues(name),
		pwErrs:            m.progressWriteErr.WithLabelValues(name),
		seriesCached:      m.seriesCached.WithLabelValues(name),
		sendDropped:       m.sendDropped.MustCurryWith(prometheus.Labels{labelRemoteName: name, labelURL: url}),
		retries:           m.retries.MustCurryWith(prometheus.Labels{labelRemoteName: name, labelURL: url}),
		resent:            m.resent.MustCurryWith(prometheus.Labels{labelRemoteName: name}),
	}
}

// maxGauge is a gauge that only moves up.
type maxGauge struct {
	mtx sync.Mutex
	v   float64
	g   prometheus.Gauge
}

func (m *maxGauge) set(v float64) {
	m.mtx.Lock()
	defer m.mtx.Unlock()
	if v > m.v {
		m.v = v
		m.g.Set(v)
	}
}
