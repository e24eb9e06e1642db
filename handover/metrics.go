package handover

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/internal/promreg"
)

// Failure reasons (label "reason" of shoal_handover_failures_total).
const (
	ReasonNoPeer    = "no_peer"   // no live participant to send to
	ReasonRefused   = "refused"   // the peer answered an error
	ReasonTooLarge  = "too_large" // over --cluster.handover.max-bytes
	ReasonVersion   = "version"   // the peer speaks another transfer version
	ReasonDeadline  = "deadline"  // --cluster.handover.timeout passed
	ReasonNetwork   = "network"   // the connection failed
	ReasonLocal     = "local"     // reading or writing local files failed
	ReasonTorn      = "torn"      // (receiving) the stream ended early or was corrupt
	ReasonBusy      = "busy"      // (receiving) another transfer in progress, or no room
	ReasonNotReady  = "not_ready" // (receiving) not a participant, or terminating
	ReasonMalformed = "malformed" // (receiving) not a valid transfer
)

type metrics struct {
	group *promreg.Group

	bytes, samples, transfers *prometheus.CounterVec // by direction
	failures                  *prometheus.CounterVec // by direction, reason
	inFlight                  *prometheus.GaugeVec   // by direction
	duration                  prometheus.Histogram
	pending, pendingBytes     prometheus.Gauge
	delivered                 prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_handover_bytes_total", Help: "Bytes of backlog handed over (direction=\"sent\") or taken over (\"received\") between replicas; received counts stored transfers only.",
		}, []string{"direction"}),
		samples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_handover_samples_total", Help: "Unsent samples and histograms in the backlogs handed over (direction=\"sent\") or taken over (\"received\").",
		}, []string{"direction"}),
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_handover_transfers_total", Help: "Backlog transfers completed (acknowledged by the receiver) by direction.",
		}, []string{"direction"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_handover_failures_total", Help: "Backlog transfers that failed, by direction and reason; a failed transfer leaves the backlog where it was.",
		}, []string{"direction", "reason"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shoal_handover_transfers_in_flight", Help: "Backlog transfers in progress, by direction.",
		}, []string{"direction"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shoal_handover_transfer_duration_seconds", Help: "Duration of completed outgoing backlog transfers.",
			Buckets: []float64{0.1, 0.5, 1, 2, 5, 10, 30, 60, 120},
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_handover_pending_backlogs", Help: "Backlogs taken over from departed replicas and not yet delivered to the remote ends.",
		}),
		pendingBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_handover_pending_bytes", Help: "Bytes of the backlogs taken over and not yet delivered.",
		}),
		delivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_handover_delivered_total", Help: "Backlogs taken over that every remote-write queue has delivered.",
		}),
	}
	for _, d := range []string{"sent", "received"} {
		m.bytes.WithLabelValues(d)
		m.samples.WithLabelValues(d)
		m.transfers.WithLabelValues(d)
		m.inFlight.WithLabelValues(d)
	}
	for _, r := range []string{ReasonNoPeer, ReasonRefused, ReasonTooLarge, ReasonVersion, ReasonDeadline, ReasonNetwork, ReasonLocal} {
		m.failures.WithLabelValues("sent", r)
	}
	for _, r := range []string{ReasonTorn, ReasonBusy, ReasonNotReady, ReasonMalformed, ReasonVersion, ReasonTooLarge, ReasonLocal} {
		m.failures.WithLabelValues("received", r)
	}
	g, err := promreg.Register(reg, m.bytes, m.samples, m.transfers, m.failures, m.inFlight, m.duration, m.pending, m.pendingBytes, m.delivered)
	if err != nil {
		return nil, err
	}
	m.group = g
	return m, nil
}

func (m *metrics) unregister() { m.group.Unregister() }
