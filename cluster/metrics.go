package cluster

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/internal/promreg"
)

type metrics struct {
	info           *prometheus.GaugeVec
	peers          *prometheus.GaugeVec
	receivedEvents *prometheus.CounterVec
	broadcasts     *prometheus.CounterVec
	ready          prometheus.Gauge
	minimumSize    prometheus.Gauge
	refused        *prometheus.CounterVec
	badMeta        prometheus.Counter
	discoveryErrs  *prometheus.CounterVec
	joins          *prometheus.CounterVec
	// Per-target weights of load-aware placement (weights.go).
	weightsPublished  prometheus.Gauge
	weightsStateBytes prometheus.Gauge
	weightsSends      *prometheus.CounterVec
	weightsBytes      *prometheus.CounterVec
	weightsRepairs    prometheus.Counter
	metaPushes        *prometheus.CounterVec
	badWeights        prometheus.Counter
	// The cluster remembered between runs (snapshot.go).
	remembered   prometheus.Gauge
	snapshotErrs *prometheus.CounterVec

	// plain holds the collectors registered as they are; named those
	// registered with the cluster_name label.
	plain, named *promreg.Group
}

// eventNodeConflict counts, in cluster_node_gossip_received_events_total,
// peers that claimed a name another node already uses.
const eventNodeConflict = "node_conflict"

// eventPush counts, in cluster_node_gossip_received_events_total, metadata
// a peer pushed straight to this node (metapush.go).
const eventPush = "push"

// newMetrics creates the node's metrics; lamport, health and alive-peers are
// read at scrape time through the given functions. Every cluster_* series
// carries a constant cluster_name label (--cluster.name, possibly empty), as
// Grafana Alloy's do, so that its clustering dashboards work on shoal.
// A nil reg registers nothing; a registration error unregisters what was
// registered and is returned, so that a node can be created again on the
// same registry once the previous one has shut down.
func newMetrics(reg prometheus.Registerer, clusterName string, lamport, health, alive func() float64) (*metrics, error) {
	m := &metrics{
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cluster_node_info",
			Help: "1 for this node's current state (viewer, participant or terminating).",
		}, []string{"state"}),
		peers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cluster_node_peers",
			Help: "Alive cluster members by state, this node included.",
		}, []string{"state"}),
		receivedEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cluster_node_gossip_received_events_total",
			Help: "Membership events received through gossip about other nodes, by event (join, leave, update, node_conflict; push: metadata a peer sent straight to this node).",
		}, []string{"event"}),
		broadcasts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cluster_node_gossip_broadcasts_total",
			Help: "Membership changes this node broadcast about itself, by event (join, leave, update; resend: an update sent again because gossip had not reported its delivery in time).",
		}, []string{"event"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cluster_ready_for_traffic",
			Help: "1 once wait-for-size is met or the wait timeout has passed.",
		}),
		minimumSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cluster_minimum_size",
			Help: "Participants to wait for before taking traffic (wait-for-size).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_cluster_refused_messages_total",
			Help: "Gossip packets and streams refused, by reason: label (cluster name mismatch), encryption (wrong or missing key), malformed (does not decode), oversized (over memberlist's size limits), overload (memberlist's queues full), timeout (a stream or TLS handshake not complete in time), tls (a failed TLS handshake: unknown CA, expired or missing certificate, not TLS).",
		}, []string{"reason"}),
		badMeta: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_cluster_bad_peer_metadata_total",
			Help: "Peer metadata updates that could not be decoded; such peers are treated as viewers.",
		}),
		discoveryErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_cluster_discovery_errors_total",
			Help: "Failed peer look-ups, by method (dns, dnssrv, kubernetes).",
		}, []string{"method"}),
		joins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_cluster_join_attempts_total",
			Help: "Attempts to join a discovered peer, by result (success, failure).",
		}, []string{"result"}),
		weightsPublished: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_cluster_weights_published",
			Help: "Per-target weights this node publishes for load-aware placement (--cluster.placement=bounded).",
		}),
		weightsStateBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_cluster_weights_state_bytes",
			Help: "Size of the per-target weights state this node last sent in a state exchange (push/pull): every set whole on a join or while a peer of an older version is a member, otherwise their versions only.",
		}),
		weightsBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_cluster_weights_sent_bytes_total",
			Help: "Bytes of per-target weights this node sent, by kind: delta (a change, to each peer), set (a whole set on change, to a peer of an older version), summary and state (push/pull: versions only, or every set whole), repair (a request for a missed set, the answer, or this node's set sent to a member that has just joined).",
		}, []string{"kind"}),
		weightsRepairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_cluster_weights_repairs_total",
			Help: "Weight sets this node asked a peer for whole because it missed a change (a delta whose base it did not hold, or a newer version named in a push/pull).",
		}),
		weightsSends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_cluster_weights_sends_total",
			Help: "Weight sets this node sent to a peer when its published weights changed, by result (success, failure; a failure is repaired by the next push/pull).",
		}, []string{"result"}),
		metaPushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_cluster_metadata_pushes_total",
			Help: "Metadata updates this node sent straight to a peer besides gossiping them, by result (success, failure; the gossip of the same update repairs a failure).",
		}, []string{"result"}),
		badWeights: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_cluster_bad_peer_weights_total",
			Help: "Per-target weight messages from peers that could not be decoded and were ignored.",
		}),
		remembered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shoal_cluster_remembered_participants",
			Help: "Participants this node remembered at start from its last run (under --storage.path); without --cluster.wait-for-size it waits for that cluster before taking targets.",
		}),
		snapshotErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_cluster_snapshot_errors_total",
			Help: "Failures to read (the file was ignored) or write the record of the cluster's members under --storage.path, by operation (read, write).",
		}, []string{"op"}),
	}
	m.snapshotErrs.WithLabelValues("read")
	m.snapshotErrs.WithLabelValues("write")
	m.weightsSends.WithLabelValues("success")
	m.weightsSends.WithLabelValues("failure")
	for _, k := range []string{"delta", "set", "summary", "state", "repair"} {
		m.weightsBytes.WithLabelValues(k)
	}
	m.metaPushes.WithLabelValues("success")
	m.metaPushes.WithLabelValues("failure")
	m.receivedEvents.WithLabelValues(eventPush)
	for _, r := range refusalReasons {
		m.refused.WithLabelValues(r)
	}
	m.receivedEvents.WithLabelValues(eventNodeConflict)
	for _, e := range []string{"join", "leave", "update"} {
		m.receivedEvents.WithLabelValues(e)
		m.broadcasts.WithLabelValues(e)
	}
	m.broadcasts.WithLabelValues("resend")
	for _, s := range []string{"dns", "dnssrv", "kubernetes"} {
		m.discoveryErrs.WithLabelValues(s)
	}
	m.joins.WithLabelValues("success")
	m.joins.WithLabelValues("failure")
	if reg == nil {
		return m, nil
	}
	plain, err := promreg.Register(reg,
		m.refused, m.badMeta, m.discoveryErrs, m.joins,
		m.weightsPublished, m.weightsStateBytes, m.weightsSends, m.weightsBytes, m.weightsRepairs, m.metaPushes, m.badWeights,
		m.remembered, m.snapshotErrs,
	)
	if err != nil {
		return nil, fmt.Errorf("cluster: registering metrics: %w", err)
	}
	named, err := promreg.Register(prometheus.WrapRegistererWith(prometheus.Labels{"cluster_name": clusterName}, reg),
		m.info, m.peers, m.receivedEvents, m.broadcasts, m.ready, m.minimumSize,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cluster_node_lamport_time",
			Help: "This node's lamport clock.",
		}, lamport),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cluster_node_gossip_health_score",
			Help: "memberlist's awareness health score; 0 is healthy, higher means this node is failing to keep up.",
		}, health),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cluster_node_gossip_alive_peers",
			Help: "Members memberlist considers alive (suspect included), this node included.",
		}, alive),
	)
	if err != nil {
		plain.Unregister()
		return nil, fmt.Errorf("cluster: registering metrics: %w", err)
	}
	m.plain, m.named = plain, named
	return m, nil
}

// unregister removes every collector newMetrics registered.
func (m *metrics) unregister() {
	m.plain.Unregister()
	m.named.Unregister()
}

// setState exposes a single cluster_node_info series, for the current state.
func (m *metrics) setState(s State) {
	for _, st := range States {
		if st != s {
			m.info.DeleteLabelValues(st.String())
		}
	}
	m.info.WithLabelValues(s.String()).Set(1)
}
