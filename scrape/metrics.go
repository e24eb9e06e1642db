package scrape

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/internal/promreg"
	"github.com/shoal-dev/shoal/ring"
)

type metrics struct {
	discovered *prometheus.GaugeVec
	owned      *prometheus.GaugeVec
	invalid    *prometheus.GaugeVec
	movedIn    prometheus.Counter
	movedOut   prometheus.Counter
	ringTokens prometheus.Gauge
	ownership  prometheus.Gauge

	group *promreg.Group // unregistered by Filter.Close
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	moved := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_targets_moved_total",
		Help: "Targets this node gained (in) or handed off (out) because the ring or its participation changed.",
	}, []string{"direction"})
	m := &metrics{
		discovered: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shoal_targets_discovered",
			Help: "Targets discovered per job, before relabelling and ownership.",
		}, []string{"job"}),
		owned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shoal_targets_owned",
			Help: "Targets per job that this node owns and scrapes.",
		}, []string{"job"}),
		invalid: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shoal_targets_invalid",
			Help: "Discovered targets per job that relabelling left invalid (no address, bad interval, ...); nobody scrapes them.",
		}, []string{"job"}),
		movedIn:  moved.WithLabelValues("in"),
		movedOut: moved.WithLabelValues("out"),
		ringTokens: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_ring_tokens",
			Help: "Tokens on the hash ring this node uses (participants × tokens per node); 0 when clustering is disabled.",
		}),
		ownership: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_ring_ownership_ratio",
			Help: "Share of the key space this node owns, counting replicas (about replication factor / participants).",
		}),
	}
	g, err := promreg.Register(reg, m.discovered, m.owned, m.invalid, moved, m.ringTokens, m.ownership)
	if err != nil {
		return nil, fmt.Errorf("scrape filter metrics: %w", err)
	}
	m.group = g
	return m, nil
}

func (m *metrics) setRing(s ringState) {
	r := RingOf(s.ring)
	m.ringTokens.Set(float64(r.Tokens()))
	switch {
	case !s.participant:
		m.ownership.Set(0)
	case s.ring == nil:
		m.ownership.Set(1)
	default:
		m.ownership.Set(r.ReplicaShare(s.self, s.rf))
	}
}

// RingOf is the hash ring under p: p itself, or the ring a load-aware
// placement places on (its Ring method); nil when there is none.
func RingOf(p Placement) *ring.Ring {
	switch v := p.(type) {
	case *ring.Ring:
		return v
	case interface{ Ring() *ring.Ring }:
		return v.Ring()
	}
	return nil
}

func ringLen(p Placement) int {
	if p == nil {
		return 0
	}
	return p.Len()
}

func (m *metrics) forgetJob(job string) {
	m.discovered.DeleteLabelValues(job)
	m.owned.DeleteLabelValues(job)
	m.invalid.DeleteLabelValues(job)
}
