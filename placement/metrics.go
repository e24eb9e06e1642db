package placement

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/internal/promreg"
)

type metrics struct {
	fencedSeq, ackedSeq, holds prometheus.Gauge
	holdSeconds                prometheus.Histogram
	holdTimeouts               prometheus.Counter
	contested, contestTimeouts prometheus.Counter
	// Scrape configuration agreement (config.go).
	driftPeers, steppedAside, placingByPrev prometheus.Gauge
	// ModeBounded.
	published, placed, load, limit, ringFallback prometheus.Gauge
	generations                                  prometheus.Counter
	group                                        *promreg.Group
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		fencedSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_handoff_fenced_sequence",
			Help: "Fences this node has completed (targets it stopped appending for); gossiped to peers.",
		}),
		ackedSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_handoff_acked_sequence",
			Help: "Highest fence whose samples every remote-write queue has had acknowledged; gossiped to peers.",
		}),
		holds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_handoff_holds",
			Help: "Remote-write holds in force: gained targets' samples wait for the previous owners' last ones.",
		}),
		holdSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "shoal_handoff_hold_duration_seconds",
			Help:    "How long the remote-write queues were held after gaining targets.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900},
		}),
		holdTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_handoff_hold_timeouts_total",
			Help: "Remote-write holds released by --cluster.handoff-timeout rather than by the peers' acknowledgements.",
		}),
		contested: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_handoff_contested_total",
			Help: "Placement generations whose gained targets waited past --cluster.handoff-delay because a participating peer followed another placement generation (it may still scrape them).",
		}),
		contestTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_handoff_contest_timeouts_total",
			Help: "Such waits ended by --cluster.handoff-timeout rather than by the peers' fences: gained targets started although a peer still followed another placement.",
		}),
		driftPeers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_cluster_config_drift_peers",
			Help: "Live peers that announce another scrape configuration (jobs, scheme, path, params, relabelling) than this node's; the ClusterConfigurationDrift alert fires when it stays above 0.",
		}),
		steppedAside: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_cluster_config_stepped_aside",
			Help: "1 while this node steps aside: it runs a scrape configuration the cluster does not place targets by, and owns nothing.",
		}),
		placingByPrev: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_cluster_config_placing_by_previous",
			Help: "1 while this node places targets by the scrape configuration it ran before its last reload, because not every participant has loaded the new one yet.",
		}),
		published: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_placement_weights_published",
			Help: "Per-target weights this node publishes (--cluster.placement=bounded): the targets it scrapes as primary, and lost ones until their new owner publishes them.",
		}),
		placed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_placement_weights_placed",
			Help: "Targets with a published weight in the bounded-load placement this node follows (every node's published weights).",
		}),
		load: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_placement_load",
			Help: "Published weight (samples/s) the bounded-load placement puts on this node.",
		}),
		limit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_placement_load_limit",
			Help: "Load every node is held to by the bounded-load placement: 1.10 × replication factor × the mean.",
		}),
		ringFallback: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_placement_ring_fallback",
			Help: "1 while this node runs --cluster.placement=bounded but places on the plain ring because a participant does not (it runs ring, or an older version that publishes no weights).",
		}),
		generations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_placement_generations_total",
			Help: "Bounded-load placements built because the participants or the published weights changed; one that moves a target is a new hand-off generation.",
		}),
	}
	cs := []prometheus.Collector{m.fencedSeq, m.ackedSeq, m.holds, m.holdSeconds, m.holdTimeouts, m.contested, m.contestTimeouts,
		m.driftPeers, m.steppedAside, m.placingByPrev,
		m.published, m.placed, m.load, m.limit, m.ringFallback, m.generations}
	g, err := promreg.Register(reg, cs...)
	if err != nil {
		return nil, fmt.Errorf("placement: %w", err)
	}
	m.group = g
	return m, nil
}

func (m *metrics) setPlaced(b *bounded, self string, placed int) {
	m.generations.Inc()
	m.placed.Set(float64(placed))
	m.load.Set(b.Load(self))
	m.limit.Set(b.Limit())
}
