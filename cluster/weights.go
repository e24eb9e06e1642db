package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
)

// Per-target weights for load-aware placement travel as memberlist delegate
// state, not node metadata: a weight per target is far beyond metadata's
// 512 bytes. Every node keeps the last set each alive member published,
// tagged with the member's incarnation (its start time) and a version that
// grows with each publication; the newest wins wherever it comes from. A
// change is sent at once to every peer over memberlist's reliable
// (TCP) channel, and the full state exchange (push/pull) repairs whatever
// a node missed.

// NodeWeights is the weight set one node last published.
type NodeWeights struct {
	// Incarnation is the publishing node's start time (Unix nanoseconds):
	// a restarted node's sets replace its previous life's.
	Incarnation int64
	// Version grows with every publication within an incarnation.
	Version uint64
	// Weights maps target keys to weights. Read-only.
	Weights map[uint64]float64
}

func (w NodeWeights) newer(o NodeWeights) bool {
	if w.Incarnation != o.Incarnation {
		return w.Incarnation > o.Incarnation
	}
	return w.Version > o.Version
}

// Weights encoding: a kind byte, then per node: name (uvarint length and
// bytes), incarnation (varint), version (uvarint), count (uvarint) and
// count × (key uint64, weight float32 bits), little endian.
const (
	msgWeights = 'w'
	// maxWeightsPerNode bounds what a decoder allocates for one node.
	maxWeightsPerNode = 1 << 22
)

// roundWeight is a weight as it travels: float32. A node uses the rounded
// value for its own set too, so that every node places the same numbers.
func roundWeight(v float64) float64 { return float64(float32(v)) }

func appendWeights(b []byte, name string, w NodeWeights) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendVarint(b, w.Incarnation)
	b = binary.AppendUvarint(b, w.Version)
	b = binary.AppendUvarint(b, uint64(len(w.Weights)))
	keys := slices.Sorted(maps.Keys(w.Weights))
	for _, k := range keys {
		b = binary.LittleEndian.AppendUint64(b, k)
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(w.Weights[k])))
	}
	return b
}

func encodeWeights(sets map[string]NodeWeights) []byte {
	b := []byte{msgWeights}
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		b = appendWeights(b, name, sets[name])
	}
	return b
}

var errShortWeights = errors.New("truncated weights message")

func decodeWeights(b []byte) (map[string]NodeWeights, error) {
	if len(b) == 0 || b[0] != msgWeights {
		return nil, errors.New("not a weights message")
	}
	r := &wireReader{b: b[1:]}
	out := map[string]NodeWeights{}
	for r.err == nil && len(r.b) > 0 {
		name := r.name()
		w := NodeWeights{Incarnation: r.varint(), Version: r.uvarint()}
		cnt := r.count(12)
		if r.err != nil {
			return nil, fmt.Errorf("node %q: %w", name, r.err)
		}
		w.Weights = make(map[uint64]float64, cnt)
		for range cnt {
			k := r.u64()
			v := float64(math.Float32frombits(binary.LittleEndian.Uint32(r.b)))
			r.b = r.b[4:]
			if !(v > 0) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("node %q: weight %v for key %016x", name, v, k)
			}
			w.Weights[k] = v
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("node %q listed twice", name)
		}
		out[name] = w
	}
	return out, r.err
}

// SetWeights publishes this node's per-target weights (key → weight; only
// positive finite weights are kept, rounded as they travel). The set
// replaces the previous one; an equal set publishes nothing, except the
// first, even empty: it replaces what peers still hold from this node's
// previous life.
func (n *Node) SetWeights(weights map[uint64]float64) {
	ws := make(map[uint64]float64, len(weights))
	for k, v := range weights {
		if v > 0 && !math.IsInf(v, 0) {
			ws[k] = roundWeight(v)
		}
	}
	n.mu.Lock()
	if n.ownWeights.Version > 0 && maps.Equal(ws, n.ownWeights.Weights) {
		n.mu.Unlock()
		return
	}
	n.ownWeights = NodeWeights{Incarnation: n.startTime.UnixNano(), Version: n.ownWeights.Version + 1, Weights: ws}
	n.mu.Unlock()
	n.metrics.weightsPublished.Set(float64(len(ws)))
	select {
	case n.weightsSend <- struct{}{}:
	default:
	}
	n.notify()
}

// Weights returns the weight set last published by every alive member
// that published one, this node included, by node name. A set from a
// member's previous life (it restarted and has not published yet) is not
// listed. The maps are shared: do not modify them.
func (n *Node) Weights() map[string]NodeWeights {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]NodeWeights, len(n.weights)+1)
	for name, w := range n.weights {
		if p, alive := n.peers[name]; alive && current(w, p) {
			out[name] = w
		}
	}
	if n.ownWeights.Version > 0 {
		out[n.cfg.NodeName] = n.ownWeights
	}
	return out
}

// weightsKeep is how long the weight set of a member that left is kept in
// case it was declared dead wrongly and comes back.
const weightsKeep = 5 * time.Minute

// pruneWeightsLocked forgets the weight sets of members gone longer than
// weightsKeep.
func (n *Node) pruneWeightsLocked(now time.Time) {
	for name, at := range n.gone {
		if now.Sub(at) > weightsKeep {
			delete(n.weights, name)
			delete(n.gone, name)
		}
	}
}

// current reports whether w is from p's present life: its incarnation
// (start time, ns) is not older than the start time p's metadata gives (ms).
func current(w NodeWeights, p Peer) bool {
	return p.StartTime.IsZero() || w.Incarnation/int64(time.Millisecond) >= p.StartTime.UnixMilli()
}

// mergeWeights takes the newer of every set in sets, except those about
// this node. A set of a node that is not an alive member is kept but not
// listed (Weights lists alive members only), so a departed node's set cannot
// come back through a peer that still has it. It must be kept all the same:
// a node that (re)joins sends its set to every member at once, and a member
// that hears of the join by gossip only after that send would otherwise go
// without the set until the next push/pull (up to 10s), placing another
// generation than the nodes that have it. Sets of nodes that do not show
// up are forgotten after weightsKeep.
func (n *Node) mergeWeights(sets map[string]NodeWeights) {
	changed := false
	now := time.Now()
	n.mu.Lock()
	for name, w := range sets {
		if name == n.cfg.NodeName {
			continue
		}
		if old, ok := n.weights[name]; ok && !w.newer(old) {
			continue
		}
		changed = n.storeWeightsLocked(name, w, now) || changed
	}
	n.pruneWeightsLocked(now)
	n.mu.Unlock()
	if changed {
		n.notify()
	}
}

// storeWeightsLocked keeps w as name's set and reports whether Weights
// lists it (name is an alive member and w is of its present life).
func (n *Node) storeWeightsLocked(name string, w NodeWeights, now time.Time) bool {
	n.weights[name] = w
	p, alive := n.peers[name]
	if !alive {
		if _, ok := n.gone[name]; !ok {
			n.gone[name] = now
		}
		return false
	}
	return current(w, p)
}

// receiveWeights decodes a weights message or state from a peer.
func (n *Node) receiveWeights(b []byte) {
	sets, err := decodeWeights(b)
	if err != nil {
		n.badWeightsMsg(err)
		return
	}
	n.mergeWeights(sets)
}

// localWeightsState is this node's weights state for push/pull: every
// alive member's set, whole on a join or while a peer does not read
// deltas, otherwise their versions only.
func (n *Node) localWeightsState(join bool) []byte {
	n.mu.Lock()
	sets := make(map[string]NodeWeights, len(n.weights)+1)
	for name, w := range n.weights {
		if p, alive := n.peers[name]; alive && current(w, p) {
			sets[name] = w
		}
	}
	if n.ownWeights.Version > 0 {
		sets[n.cfg.NodeName] = n.ownWeights
	}
	summary := !join && n.allReadDeltasLocked()
	n.mu.Unlock()
	if len(sets) == 0 {
		return nil
	}
	b, kind := encodeWeights(sets), "state"
	if summary {
		b, kind = encodeWeightsSummary(n.cfg.NodeName, sets), "summary"
	}
	n.metrics.weightsStateBytes.Set(float64(len(b)))
	n.metrics.weightsBytes.WithLabelValues(kind).Add(float64(len(b)))
	return b
}

// sendWeightsLoop sends this node's set to every peer whenever it changes,
// until ctx ends: a delta to the peers that read them, the whole set to
// the others. A failure is repaired by the next push/pull.
func (n *Node) sendWeightsLoop(ctx context.Context) {
	n.sendOnChange(ctx, n.weightsSend, "sending per-target weights", n.metrics.weightsSends, n.pendingWeightsLocked,
		func(ml *memberlist.Memberlist, a memberlist.Address, msg []byte) error {
			if err := ml.SendReliable(memberlistNode(a), msg); err != nil {
				return err
			}
			kind := "set"
			if msg[0] == msgWeightsDelta {
				kind = "delta"
			}
			n.metrics.weightsBytes.WithLabelValues(kind).Add(float64(len(msg)))
			return nil
		})
}

// pendingWeightsLocked is this node's weight set for every peer: as a
// delta from the version last sent, or whole. The version it returns is
// the one sent next, so it becomes the next delta's base.
func (n *Node) pendingWeightsLocked() (outgoing, bool) {
	own, base := n.ownWeights, n.weightsSent
	n.weightsSent = own
	deltas := !n.cfg.noWeightDeltas
	return outgoing{
		ml:        n.ml,
		version:   own.Version,
		msg:       func() []byte { return encodeWeightsDelta(diffWeights(n.cfg.NodeName, base, own)) },
		to:        n.peerAddrsLocked(func(p Peer) bool { return deltas && p.deltas }),
		legacyMsg: func() []byte { return appendWeights([]byte{msgWeights}, n.cfg.NodeName, own) },
		legacy:    n.peerAddrsLocked(func(p Peer) bool { return !deltas || !p.deltas }),
	}, true
}
