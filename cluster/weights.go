package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Per-target weights for load-aware placement travel as memberlist user
// messages and delegate state, not node metadata: a weight per target is
// far beyond metadata's 512 bytes. Every node keeps the last set each alive
// member published, tagged with the member's incarnation (its start time)
// and a version that grows with each publication; the newest wins wherever
// it comes from.
//
// Only changes travel once a peer has a set: a publication goes to every
// peer over memberlist's reliable (TCP) channel as a delta from the version
// last sent (the weights set or changed, the keys dropped). The periodic
// full state exchange (push/pull) carries a summary, each publisher's
// incarnation and version, not the weights, so its size grows with the
// members, never with the targets. A node that is behind (a delta whose
// base it does not have, or a summary newer than what it holds) asks for
// the whole set of that publisher (a want), and gets it from the node that
// has it. Only a node joining the cluster gets every set in its push/pull.
// docs/BENCHMARKS.md ("Weights gossip") measures the bytes.

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

// Weights encodings, little endian, names as uvarint length and bytes:
//
//   - full ('w'): per node: name, incarnation (varint), version (uvarint),
//     count (uvarint) and count × (key uint64, weight float32 bits).
//   - delta ('d'): name, incarnation, base version, version, count of set
//     weights and as many (key, weight), count of dropped keys and as many
//     keys. Base 0 is the empty set: a first publication is a delta too.
//   - summary ('s'): the sender's name, then per node: name, incarnation,
//     version.
//   - want ('q'): the sender's name, then the names of the nodes whose
//     whole sets it asks for.
const (
	msgWeights        = 'w'
	msgWeightsDelta   = 'd'
	msgWeightsSummary = 's'
	msgWeightsWant    = 'q'
	// maxWeightsPerNode bounds what a decoder allocates for one node.
	maxWeightsPerNode = 1 << 22
	// maxWeightsNodes bounds the nodes of a summary or a want.
	maxWeightsNodes = 1 << 16
)

// roundWeight is a weight as it travels: float32. A node uses the rounded
// value for its own set too, so that every node places the same numbers.
func roundWeight(v float64) float64 { return float64(float32(v)) }

func appendName(b []byte, name string) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	return append(b, name...)
}

func appendWeights(b []byte, name string, w NodeWeights) []byte {
	b = appendName(b, name)
	b = binary.AppendVarint(b, w.Incarnation)
	b = binary.AppendUvarint(b, w.Version)
	b = binary.AppendUvarint(b, uint64(len(w.Weights)))
	for _, k := range slices.Sorted(maps.Keys(w.Weights)) {
		b = appendWeight(b, k, w.Weights[k])
	}
	return b
}

func appendWeight(b []byte, k uint64, v float64) []byte {
	b = binary.LittleEndian.AppendUint64(b, k)
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v)))
}

func encodeWeights(sets map[string]NodeWeights) []byte {
	b := []byte{msgWeights}
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		b = appendWeights(b, name, sets[name])
	}
	return b
}

// weightsDelta is what changed in one node's set between two versions.
type weightsDelta struct {
	name          string
	incarnation   int64
	base, version uint64
	set           map[uint64]float64 // added or changed
	dropped       []uint64
}

// diffWeights is the delta from old (version base) to cur.
func diffWeights(name string, base uint64, old map[uint64]float64, cur NodeWeights) weightsDelta {
	d := weightsDelta{name: name, incarnation: cur.Incarnation, base: base, version: cur.Version, set: map[uint64]float64{}}
	for k, v := range cur.Weights {
		if ov, ok := old[k]; !ok || ov != v {
			d.set[k] = v
		}
	}
	for k := range old {
		if _, ok := cur.Weights[k]; !ok {
			d.dropped = append(d.dropped, k)
		}
	}
	slices.Sort(d.dropped)
	return d
}

func encodeDelta(d weightsDelta) []byte {
	b := appendName([]byte{msgWeightsDelta}, d.name)
	b = binary.AppendVarint(b, d.incarnation)
	b = binary.AppendUvarint(b, d.base)
	b = binary.AppendUvarint(b, d.version)
	b = binary.AppendUvarint(b, uint64(len(d.set)))
	for _, k := range slices.Sorted(maps.Keys(d.set)) {
		b = appendWeight(b, k, d.set[k])
	}
	b = binary.AppendUvarint(b, uint64(len(d.dropped)))
	for _, k := range d.dropped {
		b = binary.LittleEndian.AppendUint64(b, k)
	}
	return b
}

// weightsVersion is one entry of a summary.
type weightsVersion struct {
	incarnation int64
	version     uint64
}

func encodeSummary(from string, sets map[string]NodeWeights) []byte {
	b := appendName([]byte{msgWeightsSummary}, from)
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		b = appendName(b, name)
		b = binary.AppendVarint(b, sets[name].Incarnation)
		b = binary.AppendUvarint(b, sets[name].Version)
	}
	return b
}

func encodeWant(from string, names []string) []byte {
	b := appendName([]byte{msgWeightsWant}, from)
	for _, name := range names {
		b = appendName(b, name)
	}
	return b
}

var errShortWeights = errors.New("truncated weights message")

// wreader reads the fields of a weights message; the first error sticks.
type wreader struct {
	b   []byte
	err error
}

func (r *wreader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *wreader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(errShortWeights)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wreader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(errShortWeights)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wreader) name() string {
	l := r.uvarint()
	if r.err != nil {
		return ""
	}
	if l == 0 || l > uint64(len(r.b)) {
		r.fail(fmt.Errorf("bad node name length %d", l))
		return ""
	}
	s := string(r.b[:l])
	r.b = r.b[l:]
	return s
}

// count reads a count of items of size bytes each, refusing one that
// cannot fit in what is left.
func (r *wreader) count(size uint64, what string) uint64 {
	c := r.uvarint()
	if r.err == nil && (c > maxWeightsPerNode || c*size > uint64(len(r.b))) {
		r.fail(fmt.Errorf("%d %s in %d bytes", c, what, len(r.b)))
		return 0
	}
	return c
}

// weights reads cnt (key, weight) pairs into m.
func (r *wreader) weights(cnt uint64, m map[uint64]float64) {
	for range cnt {
		if r.err != nil {
			return
		}
		k := binary.LittleEndian.Uint64(r.b)
		v := float64(math.Float32frombits(binary.LittleEndian.Uint32(r.b[8:])))
		r.b = r.b[12:]
		if !(v > 0) || math.IsInf(v, 0) {
			r.fail(fmt.Errorf("weight %v for key %016x", v, k))
			return
		}
		m[k] = v
	}
}

func decodeWeights(b []byte) (map[string]NodeWeights, error) {
	if len(b) == 0 || b[0] != msgWeights {
		return nil, errors.New("not a weights message")
	}
	r := &wreader{b: b[1:]}
	out := map[string]NodeWeights{}
	for len(r.b) > 0 && r.err == nil {
		name := r.name()
		inc := r.varint()
		ver := r.uvarint()
		cnt := r.count(12, "weights")
		ws := make(map[uint64]float64, cnt)
		r.weights(cnt, ws)
		if r.err != nil {
			return nil, fmt.Errorf("node %q: %w", name, r.err)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("node %q listed twice", name)
		}
		out[name] = NodeWeights{Incarnation: inc, Version: ver, Weights: ws}
	}
	return out, r.err
}

func decodeDelta(b []byte) (weightsDelta, error) {
	r := &wreader{b: b[1:]}
	d := weightsDelta{name: r.name(), incarnation: r.varint(), base: r.uvarint(), version: r.uvarint()}
	cnt := r.count(12, "weights")
	d.set = make(map[uint64]float64, cnt)
	r.weights(cnt, d.set)
	cnt = r.count(8, "dropped keys")
	for range cnt {
		if r.err != nil {
			break
		}
		d.dropped = append(d.dropped, binary.LittleEndian.Uint64(r.b))
		r.b = r.b[8:]
	}
	if r.err == nil && (len(r.b) > 0 || d.version <= d.base) {
		r.fail(fmt.Errorf("bad delta of node %q (versions %d to %d, %d bytes left)", d.name, d.base, d.version, len(r.b)))
	}
	return d, r.err
}

func decodeSummary(b []byte) (string, map[string]weightsVersion, error) {
	r := &wreader{b: b[1:]}
	from := r.name()
	out := map[string]weightsVersion{}
	for len(r.b) > 0 && r.err == nil && len(out) < maxWeightsNodes {
		name := r.name()
		out[name] = weightsVersion{incarnation: r.varint(), version: r.uvarint()}
	}
	return from, out, r.err
}

func decodeWant(b []byte) (string, []string, error) {
	r := &wreader{b: b[1:]}
	from := r.name()
	var names []string
	for len(r.b) > 0 && r.err == nil && len(names) < maxWeightsNodes {
		names = append(names, r.name())
	}
	return from, names, r.err
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
	n.wakeWeightsSender()
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
		n.weights[name] = w
		p, alive := n.peers[name]
		if !alive {
			if _, ok := n.gone[name]; !ok {
				n.gone[name] = now
			}
			continue
		}
		changed = changed || current(w, p)
	}
	n.pruneWeightsLocked(now)
	n.mu.Unlock()
	if changed {
		n.notify()
	}
}

// receiveWeights handles a weights message or state from a peer.
func (n *Node) receiveWeights(b []byte) {
	var err error
	switch {
	case len(b) == 0:
		err = errors.New("empty weights message")
	case b[0] == msgWeights:
		var sets map[string]NodeWeights
		if sets, err = decodeWeights(b); err == nil {
			n.mergeWeights(sets)
		}
	case b[0] == msgWeightsDelta:
		var d weightsDelta
		if d, err = decodeDelta(b); err == nil {
			n.applyDelta(d)
		}
	case b[0] == msgWeightsSummary:
		from, vs, derr := decodeSummary(b)
		if err = derr; err == nil {
			n.compareSummary(from, vs)
		}
	case b[0] == msgWeightsWant:
		from, names, derr := decodeWant(b)
		if err = derr; err == nil {
			n.outbox.queue(from, names, true)
			n.wakeWeightsSender()
		}
	default:
		err = fmt.Errorf("unknown weights message kind %q", b[0])
	}
	if err != nil {
		n.metrics.badWeights.Inc()
		n.logger.Warn("peer sent per-target weights this node cannot read; ignoring them", "err", err)
	}
}

// applyDelta applies a publisher's delta to the set this node holds, or
// asks the publisher for its whole set when it does not hold the delta's
// base (it missed a publication, or the publisher restarted).
func (n *Node) applyDelta(d weightsDelta) {
	if d.name == n.cfg.NodeName {
		return
	}
	next := NodeWeights{Incarnation: d.incarnation, Version: d.version}
	n.mu.Lock()
	old, have := n.weights[d.name]
	n.mu.Unlock()
	if have && !next.newer(old) {
		return // already applied, or older
	}
	var base map[uint64]float64
	switch {
	case d.base == 0:
	case have && old.Incarnation == d.incarnation && old.Version == d.base:
		base = old.Weights
	default:
		n.outbox.queue(d.name, []string{d.name}, false)
		n.wakeWeightsSender()
		return
	}
	ws := make(map[uint64]float64, len(base)+len(d.set))
	maps.Copy(ws, base)
	maps.Copy(ws, d.set)
	for _, k := range d.dropped {
		delete(ws, k)
	}
	next.Weights = ws
	n.mergeWeights(map[string]NodeWeights{d.name: next})
}

// compareSummary asks the sender of a summary for the sets it has in a
// newer version than this node.
func (n *Node) compareSummary(from string, vs map[string]weightsVersion) {
	var want []string
	n.mu.Lock()
	for name, v := range vs {
		if name == n.cfg.NodeName {
			continue
		}
		if old, ok := n.weights[name]; !ok || (NodeWeights{Incarnation: v.incarnation, Version: v.version}).newer(old) {
			want = append(want, name)
		}
	}
	n.mu.Unlock()
	if len(want) > 0 && from != n.cfg.NodeName {
		slices.Sort(want)
		n.outbox.queue(from, want, false)
		n.wakeWeightsSender()
	}
}

// weightsOutbox holds the wants to send and the wants to answer, by peer,
// for sendWeightsLoop. The zero value is ready.
type weightsOutbox struct {
	mu      sync.Mutex
	wants   map[string]map[string]bool // peer → the publishers to ask it for
	answers map[string]map[string]bool // peer → the sets to send it
}

func (o *weightsOutbox) queue(peer string, names []string, answer bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := &o.wants
	if answer {
		m = &o.answers
	}
	if *m == nil {
		*m = map[string]map[string]bool{}
	}
	if (*m)[peer] == nil {
		(*m)[peer] = map[string]bool{}
	}
	for _, name := range names {
		(*m)[peer][name] = true
	}
}

func (o *weightsOutbox) take() (wants, answers map[string]map[string]bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	wants, answers = o.wants, o.answers
	o.wants, o.answers = nil, nil
	return wants, answers
}

func (n *Node) wakeWeightsSender() {
	select {
	case n.weightsSend <- struct{}{}:
	default:
	}
}

// heldWeightsLocked is the sets this node holds that a peer may use: every
// alive member's current set and its own.
func (n *Node) heldWeightsLocked() map[string]NodeWeights {
	sets := make(map[string]NodeWeights, len(n.weights)+1)
	for name, w := range n.weights {
		if p, alive := n.peers[name]; alive && current(w, p) {
			sets[name] = w
		}
	}
	if n.ownWeights.Version > 0 {
		sets[n.cfg.NodeName] = n.ownWeights
	}
	return sets
}

// localWeightsState is this node's weights state for a push/pull: every
// set whole for a node joining the cluster, else only the summary.
func (n *Node) localWeightsState(join bool) []byte {
	n.mu.Lock()
	sets := n.heldWeightsLocked()
	n.mu.Unlock()
	if len(sets) == 0 {
		return nil
	}
	var b []byte
	if join {
		b = encodeWeights(sets)
	} else {
		b = encodeSummary(n.cfg.NodeName, sets)
	}
	n.metrics.weightsStateBytes.Set(float64(len(b)))
	return b
}

// sendWeightsLoop sends this node's changes to every peer as deltas
// (coalesced), asks for and answers whole sets, until ctx ends.
func (n *Node) sendWeightsLoop(ctx context.Context) {
	var (
		sent    uint64             // version last sent
		sentSet map[uint64]float64 // its weights (shared, read-only)
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.weightsSend:
		}
		n.mu.Lock()
		own, ml := n.ownWeights, n.ml
		n.mu.Unlock()
		if ml == nil {
			continue
		}
		// Members takes memberlist's node lock, which memberlist holds
		// while it calls into this node (which takes n.mu): never under n.mu.
		peers := map[string]*memberlist.Node{}
		for _, m := range ml.Members() {
			if m.Name != n.cfg.NodeName {
				peers[m.Name] = m
			}
		}
		send := func(to *memberlist.Node, msg []byte) {
			// A failure is repaired by a want, after the next delta or
			// push/pull shows the peer is behind.
			if err := ml.SendReliable(to, msg); err != nil {
				n.metrics.weightsSends.WithLabelValues("failure").Inc()
				n.logger.Debug("sending per-target weights failed", "peer", to.Name, "err", err)
				return
			}
			n.metrics.weightsSends.WithLabelValues("success").Inc()
		}
		if own.Version != sent {
			msg := encodeDelta(diffWeights(n.cfg.NodeName, sent, sentSet, own))
			for _, name := range slices.Sorted(maps.Keys(peers)) {
				if ctx.Err() != nil {
					return
				}
				send(peers[name], msg)
			}
			sent, sentSet = own.Version, own.Weights
		}
		wants, answers := n.outbox.take()
		for peer, names := range wants {
			if to, ok := peers[peer]; ok && ctx.Err() == nil {
				send(to, encodeWant(n.cfg.NodeName, slices.Sorted(maps.Keys(names))))
			}
		}
		for peer, names := range answers {
			to, ok := peers[peer]
			if !ok || ctx.Err() != nil {
				continue
			}
			n.mu.Lock()
			held := n.heldWeightsLocked()
			n.mu.Unlock()
			maps.DeleteFunc(held, func(name string, _ NodeWeights) bool { return !names[name] })
			if len(held) > 0 {
				send(to, encodeWeights(held))
			}
		}
	}
}
