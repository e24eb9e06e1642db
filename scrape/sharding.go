package scrape

import (
	"fmt"
	"slices"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

// ShardingLabel is the target label that selects how a target is sharded;
// relabelling sets it (a static label, or a rule per job). Its values are
// ShardingRing (the default, also for an empty value), ShardingAll and
// ShardingNodeLocal.
const ShardingLabel = "__shoal_sharding__"

// KubeNodeLabel is the discovered label that names a target's Kubernetes
// node (Prometheus' Kubernetes pod discovery sets it).
const KubeNodeLabel = "__meta_kubernetes_pod_node_name"

// Sharding modes.
const (
	// ShardingRing: the ring's first replication-factor participants.
	ShardingRing = "ring"
	// ShardingAll: every participant, each with the replica label set to
	// its node name, so that each writes its own series.
	ShardingAll = "all"
	// ShardingNodeLocal: the participant on the target's Kubernetes node
	// (KubeNodeLabel against the peers' gossiped node names); the ring when
	// the target has no node or no participant runs there.
	ShardingNodeLocal = "node-local"
)

type shardMode uint8

const (
	modeRing shardMode = iota
	modeAll
	modeNodeLocal
)

// shardingOf reads a target's mode from its final labels and its node from
// its discovered ones (meta labels are gone after relabelling).
func shardingOf(final labels.Labels, tl, gl model.LabelSet) (shardMode, string, error) {
	var mode shardMode
	switch v := final.Get(ShardingLabel); v {
	case "", ShardingRing:
		mode = modeRing
	case ShardingAll:
		mode = modeAll
	case ShardingNodeLocal:
		mode = modeNodeLocal
	default:
		return 0, "", fmt.Errorf("%s %q: want %s, %s or %s", ShardingLabel, v, ShardingRing, ShardingAll, ShardingNodeLocal)
	}
	node := tl[KubeNodeLabel]
	if node == "" {
		node = gl[KubeNodeLabel]
	}
	return mode, string(node), nil
}

// kubeNodes maps participants to the Kubernetes node they run on. The
// Filter keeps a pointer in ringState, so that a new map is a new state.
type kubeNodes struct {
	byPeer map[string]string
}

// ownersOf returns the nodes that scrape e under s, appended to buf[:0]:
// the ring's owners, every participant (all), or the participant on the
// target's node (node-local). The decision is taken before the ring lookup.
func (s ringState) ownersOf(e entry, buf []string) []string {
	switch {
	case s.ring == nil:
	case e.mode == modeAll:
		return append(buf[:0], s.ring.Nodes()...)
	case e.mode == modeNodeLocal && e.node != "":
		if o, ok := s.nodeLocalOwner(e.key, e.node); ok {
			return append(buf[:0], o)
		}
	}
	return s.owners(e.key, buf)
}

// nodeLocalOwner is the participant running on node; if several claim it
// (a replica being replaced), the first of them clockwise from key, so that
// every node picks the same one.
func (s ringState) nodeLocalOwner(key uint64, node string) (string, bool) {
	if s.kube == nil {
		return "", false
	}
	var claim []string
	for _, p := range s.ring.Nodes() {
		if s.kube.byPeer[p] == node {
			claim = append(claim, p)
		}
	}
	switch len(claim) {
	case 0:
		return "", false
	case 1:
		return claim[0], true
	}
	for _, o := range s.ring.Owners(key, s.ring.Len(), nil) {
		if slices.Contains(claim, o) {
			return o, true
		}
	}
	return claim[0], true
}

// rankOf reports whether s.self scrapes e under s, and as which rank (always
// 0 outside ring mode: all-mode series differ by node name instead).
func (s ringState) rankOf(e entry, buf []string) (int, bool) {
	if !s.participant {
		return 0, false
	}
	if s.ring == nil {
		return 0, true
	}
	i := slices.Index(s.ownersOf(e, buf), s.self)
	if i > 0 && e.mode != modeRing {
		i = 0
	}
	return i, i >= 0
}

// setKubeNodes tells the Filter which Kubernetes node each participant runs
// on (peer name to node name), for node-local targets. Like SetRing, calls
// are coalesced.
func (f *Filter) setKubeNodes(byPeer map[string]string) {
	f.mu.Lock()
	f.latest.kube = &kubeNodes{byPeer: byPeer}
	f.mu.Unlock()
	select {
	case f.ringSignal <- struct{}{}:
	default:
	}
}
