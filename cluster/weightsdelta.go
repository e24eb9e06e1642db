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

// Weight deltas. A node's weight set changes a little at a time (a target
// handed over, a load that left the hysteresis band), so between nodes that
// read them (featureWeightDeltas) only changes travel:
//
//   - a change goes to every peer as a delta: the keys added or changed and
//     the keys removed since the version the peers were last sent (the
//     delta's base). The first set of a life has base 0 and is whole;
//   - a push/pull carries every set's version only (a summary), except on a
//     join, which carries the sets whole;
//   - a node that finds itself behind (a delta whose base it does not hold,
//     a summary naming a newer version) asks for the set whole: from its
//     publisher, or from the peer whose summary named it, over TCP.
//
// A peer of an older version is sent whole sets on change, and while the
// cluster has one, push/pull carries whole state as before.

const (
	// msgWeightsDelta: publisher name, incarnation (varint), base and
	// version (uvarint), count and count × (key uint64, weight float32
	// bits) set, count and count × key uint64 removed; little endian.
	msgWeightsDelta = 'd'
	// msgWeightsSummary: the sender's name, then per set: name,
	// incarnation, version. Push/pull state only.
	msgWeightsSummary = 's'
	// msgWeightsWant: the asking node's name, then the names of the sets
	// it wants whole; answered with a msgWeights message.
	msgWeightsWant = 'q'
	// featureWeightDeltas in nodeMeta.Features says the node reads the three
	// messages above. Nodes of older versions would count them as bad
	// weights.
	featureWeightDeltas = 1 << 1
)

// features is what this node says it reads and announces
// (nodeMeta.Features). Callers hold n.mu.
func (n *Node) features() uint64 {
	f := uint64(featureMetaPush | featureLostSeq)
	if !n.cfg.noWeightDeltas {
		f |= featureWeightDeltas
	}
	if n.watermarks.Continued {
		f |= featureContinued
	}
	if n.watermarks.Final {
		f |= featureFinal
	}
	return f
}

// weightsDelta is the change from one version of a node's set to the next.
type weightsDelta struct {
	name          string
	inc           int64
	base, version uint64
	set           map[uint64]float64 // added or changed
	removed       []uint64
}

// diffWeights is the delta that turns from (a version already sent, or the
// zero set) into to.
func diffWeights(name string, from, to NodeWeights) weightsDelta {
	d := weightsDelta{name: name, inc: to.Incarnation, base: from.Version, version: to.Version, set: map[uint64]float64{}}
	if from.Incarnation != to.Incarnation {
		d.base = 0
		from = NodeWeights{}
	}
	for k, v := range to.Weights {
		if old, ok := from.Weights[k]; !ok || old != v {
			d.set[k] = v
		}
	}
	for k := range from.Weights {
		if _, ok := to.Weights[k]; !ok {
			d.removed = append(d.removed, k)
		}
	}
	slices.Sort(d.removed)
	return d
}

// apply returns the set that d turns w into: a new map, w's is shared.
func (d weightsDelta) apply(w NodeWeights) NodeWeights {
	ws := make(map[uint64]float64, len(w.Weights)+len(d.set))
	if d.base != 0 {
		maps.Copy(ws, w.Weights)
	}
	maps.Copy(ws, d.set)
	for _, k := range d.removed {
		delete(ws, k)
	}
	return NodeWeights{Incarnation: d.inc, Version: d.version, Weights: ws}
}

func appendName(b []byte, name string) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	return append(b, name...)
}

func encodeWeightsDelta(d weightsDelta) []byte {
	b := make([]byte, 0, 32+len(d.name)+12*len(d.set)+8*len(d.removed))
	b = append(b, msgWeightsDelta)
	b = appendName(b, d.name)
	b = binary.AppendVarint(b, d.inc)
	b = binary.AppendUvarint(b, d.base)
	b = binary.AppendUvarint(b, d.version)
	b = binary.AppendUvarint(b, uint64(len(d.set)))
	for _, k := range slices.Sorted(maps.Keys(d.set)) {
		b = binary.LittleEndian.AppendUint64(b, k)
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(d.set[k])))
	}
	b = binary.AppendUvarint(b, uint64(len(d.removed)))
	for _, k := range d.removed {
		b = binary.LittleEndian.AppendUint64(b, k)
	}
	return b
}

// wireReader reads the fields of the weights messages, remembering the
// first error.
type wireReader struct {
	b   []byte
	err error
}

func (r *wireReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *wireReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail(errShortWeights)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wireReader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail(errShortWeights)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wireReader) name() string {
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

// count reads a count of items of size bytes each, refusing one the rest of
// the message cannot hold.
func (r *wireReader) count(size int) int {
	c := r.uvarint()
	if r.err == nil && (c > maxWeightsPerNode || c*uint64(size) > uint64(len(r.b))) {
		r.fail(fmt.Errorf("%d entries of %d bytes in %d bytes", c, size, len(r.b)))
		return 0
	}
	return int(c)
}

func (r *wireReader) u64() uint64 {
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func decodeWeightsDelta(b []byte) (weightsDelta, error) {
	if len(b) == 0 || b[0] != msgWeightsDelta {
		return weightsDelta{}, errors.New("not a weights delta")
	}
	r := &wireReader{b: b[1:]}
	d := weightsDelta{name: r.name(), inc: r.varint(), base: r.uvarint(), version: r.uvarint()}
	cnt := r.count(12)
	if r.err != nil {
		return d, r.err
	}
	d.set = make(map[uint64]float64, cnt)
	for range cnt {
		k := r.u64()
		v := float64(math.Float32frombits(binary.LittleEndian.Uint32(r.b)))
		r.b = r.b[4:]
		if !(v > 0) || math.IsInf(v, 0) {
			return d, fmt.Errorf("node %q: weight %v for key %016x", d.name, v, k)
		}
		d.set[k] = v
	}
	cnt = r.count(8)
	for range cnt {
		d.removed = append(d.removed, r.u64())
	}
	switch {
	case r.err != nil:
		return d, r.err
	case len(r.b) != 0:
		return d, fmt.Errorf("node %q: %d bytes after the delta", d.name, len(r.b))
	case d.version <= d.base:
		return d, fmt.Errorf("node %q: delta from version %d to %d", d.name, d.base, d.version)
	case d.base == 0 && len(d.removed) > 0:
		return d, fmt.Errorf("node %q: a whole set (base 0) that removes keys", d.name)
	}
	return d, nil
}

// weightsVersion is one entry of a summary.
type weightsVersion struct {
	inc     int64
	version uint64
}

func encodeWeightsSummary(sender string, sets map[string]NodeWeights) []byte {
	b := appendName([]byte{msgWeightsSummary}, sender)
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		b = appendName(b, name)
		b = binary.AppendVarint(b, sets[name].Incarnation)
		b = binary.AppendUvarint(b, sets[name].Version)
	}
	return b
}

func decodeWeightsSummary(b []byte) (string, map[string]weightsVersion, error) {
	if len(b) == 0 || b[0] != msgWeightsSummary {
		return "", nil, errors.New("not a weights summary")
	}
	r := &wireReader{b: b[1:]}
	sender := r.name()
	out := map[string]weightsVersion{}
	for r.err == nil && len(r.b) > 0 {
		name := r.name()
		v := weightsVersion{inc: r.varint(), version: r.uvarint()}
		if _, dup := out[name]; dup && r.err == nil {
			r.fail(fmt.Errorf("node %q listed twice", name))
		}
		out[name] = v
	}
	return sender, out, r.err
}

func encodeWeightsWant(self string, names []string) []byte {
	b := appendName([]byte{msgWeightsWant}, self)
	for _, name := range names {
		b = appendName(b, name)
	}
	return b
}

func decodeWeightsWant(b []byte) (string, []string, error) {
	if len(b) == 0 || b[0] != msgWeightsWant {
		return "", nil, errors.New("not a weights request")
	}
	r := &wireReader{b: b[1:]}
	from := r.name()
	var names []string
	for r.err == nil && len(r.b) > 0 {
		names = append(names, r.name())
	}
	return from, names, r.err
}

// badWeightsMsg counts and logs a weights message this node cannot read.
func (n *Node) badWeightsMsg(err error) {
	n.metrics.badWeights.Inc()
	n.logger.Warn("peer sent per-target weights this node cannot read; ignoring them", "err", err)
}

// receiveWeightsDelta applies a publisher's delta when this node holds its
// base, and otherwise asks the publisher for the whole set.
func (n *Node) receiveWeightsDelta(b []byte) {
	d, err := decodeWeightsDelta(b)
	if err != nil {
		n.badWeightsMsg(err)
		return
	}
	if d.name == n.cfg.NodeName {
		return
	}
	if d.base == 0 {
		n.mergeWeights(map[string]NodeWeights{d.name: d.apply(NodeWeights{})})
		return
	}
	n.mu.Lock()
	old, ok := n.weights[d.name]
	changed := false
	switch next := (NodeWeights{Incarnation: d.inc, Version: d.version}); {
	case ok && old.Incarnation == d.inc && old.Version == d.base:
		changed = n.storeWeightsLocked(d.name, d.apply(old), time.Now())
	case ok && !next.newer(old):
		// Known already, or older than what is held.
	default:
		n.wantWeightsLocked(d.name, d.name)
	}
	n.mu.Unlock()
	if changed {
		n.notify()
	}
}

// receiveWeightsSummary asks the summary's sender for every set it holds in
// a newer version than this node.
func (n *Node) receiveWeightsSummary(b []byte) {
	sender, vs, err := decodeWeightsSummary(b)
	if err != nil {
		n.badWeightsMsg(err)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for name, v := range vs {
		if name == n.cfg.NodeName {
			continue
		}
		if old, ok := n.weights[name]; ok && !(NodeWeights{Incarnation: v.inc, Version: v.version}).newer(old) {
			continue
		}
		n.wantWeightsLocked(sender, name)
	}
}

// receiveWeightsWant queues the answer to a peer that asks for sets whole.
func (n *Node) receiveWeightsWant(b []byte) {
	from, names, err := decodeWeightsWant(b)
	if err != nil {
		n.badWeightsMsg(err)
		return
	}
	n.mu.Lock()
	for _, name := range names {
		n.repair.addGive(from, name)
	}
	n.mu.Unlock()
	n.kickRepair()
}

// weightsRepair is what repairWeightsLoop has to send: per peer, the sets
// to ask it for (want, with when they were first wanted) and the sets it
// asked for (give). Under n.mu.
type weightsRepair struct {
	want map[string]map[string]time.Time
	give map[string]map[string]struct{}
}

func (r *weightsRepair) addWant(peer, name string, at time.Time) {
	if r.want == nil {
		r.want = map[string]map[string]time.Time{}
	}
	if r.want[peer] == nil {
		r.want[peer] = map[string]time.Time{}
	}
	if _, ok := r.want[peer][name]; !ok {
		r.want[peer][name] = at
	}
}

func (r *weightsRepair) addGive(peer, name string) {
	if r.give == nil {
		r.give = map[string]map[string]struct{}{}
	}
	if r.give[peer] == nil {
		r.give[peer] = map[string]struct{}{}
	}
	r.give[peer][name] = struct{}{}
}

// wantWeightsLocked asks peer for name's set whole.
func (n *Node) wantWeightsLocked(peer, name string) {
	n.metrics.weightsRepairs.Inc()
	n.repair.addWant(peer, name, time.Now())
	n.kickRepair()
}

// wantKeep is how long a request waits for a peer this node does not know
// yet: a node that has just restarted sends its changes to members that
// hear of its join by gossip only later (as earlyKeep for pushes).
const wantKeep = earlyKeep

func (n *Node) kickRepair() {
	select {
	case n.repairKick <- struct{}{}:
	default:
	}
}

// repairWeightsLoop sends the requests for whole sets and the answers to
// them, until ctx ends. A request or an answer that fails is dropped: the
// next push/pull finds the gap again.
func (n *Node) repairWeightsLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.repairKick:
		}
		n.mu.Lock()
		addrs, want, answers := n.takeRepairLocked(time.Now())
		ml := n.ml
		n.mu.Unlock()
		if ml == nil {
			continue
		}
		for _, peer := range slices.Sorted(maps.Keys(addrs)) {
			if ctx.Err() != nil {
				return
			}
			if names := want[peer]; len(names) > 0 {
				n.sendRepair(ml, addrs[peer], encodeWeightsWant(n.cfg.NodeName, names))
			}
			if sets := answers[peer]; len(sets) > 0 {
				n.sendRepair(ml, addrs[peer], encodeWeights(sets))
			}
		}
	}
}

// takeRepairLocked takes what there is to send to known peers: their
// addresses, the set names to ask each for, and the sets to answer each
// with. Requests to a peer not known yet stay for wantKeep; answers to one
// are dropped (it asks again after the next push/pull).
func (n *Node) takeRepairLocked(now time.Time) (map[string]memberlist.Address, map[string][]string, map[string]map[string]NodeWeights) {
	r := n.repair
	n.repair = weightsRepair{}
	addrs := map[string]memberlist.Address{}
	want := map[string][]string{}
	for peer, names := range r.want {
		p, ok := n.peers[peer]
		if !ok {
			for name, at := range names {
				if now.Sub(at) < wantKeep {
					n.repair.addWant(peer, name, at)
				}
			}
			continue
		}
		addrs[peer] = memberlist.Address{Addr: p.Addr, Name: p.Name}
		want[peer] = slices.Sorted(maps.Keys(names))
	}
	answers := map[string]map[string]NodeWeights{}
	for peer, names := range r.give {
		if p, ok := n.peers[peer]; ok {
			addrs[peer] = memberlist.Address{Addr: p.Addr, Name: p.Name}
			answers[peer] = n.setsLocked(names)
		}
	}
	return addrs, want, answers
}

func (n *Node) sendRepair(ml *memberlist.Memberlist, a memberlist.Address, msg []byte) {
	if err := ml.SendReliable(memberlistNode(a), msg); err != nil {
		n.logger.Debug("repairing per-target weights failed", "peer", a.Name, "err", err)
		return
	}
	n.metrics.weightsBytes.WithLabelValues("repair").Add(float64(len(msg)))
}

// setsLocked returns the named sets this node can vouch for: its own and
// those of alive members in their present life.
func (n *Node) setsLocked(names map[string]struct{}) map[string]NodeWeights {
	out := map[string]NodeWeights{}
	for name := range names {
		if name == n.cfg.NodeName {
			if n.ownWeights.Version > 0 {
				out[name] = n.ownWeights
			}
			continue
		}
		if w, ok := n.weights[name]; ok {
			if p, alive := n.peers[name]; alive && current(w, p) {
				out[name] = w
			}
		}
	}
	return out
}

// allReadDeltasLocked reports whether every alive peer reads weight
// summaries, so that push/pull can carry versions only.
func (n *Node) allReadDeltasLocked() bool {
	if n.cfg.noWeightDeltas {
		return false
	}
	for _, p := range n.peers {
		if !p.deltas {
			return false
		}
	}
	return true
}

// WeightsWireSizes is what per-target weights cost on the wire, with the
// encoders the nodes use, in a cluster of members (named shoal-0, shoal-1,
// …) whose published sets hold targets in all, spread evenly: the state
// of a push/pull whole (on a join, or with a member of an older version)
// and as versions only, and the delta of one publication that changes
// changed of one member's weights.
func WeightsWireSizes(targets, members, changed int) (whole, summary, delta int) {
	members = max(members, 1)
	sets := make(map[string]NodeWeights, members)
	for m := range members {
		ws := make(map[uint64]float64, targets/members+1)
		for k := m; k < targets; k += members {
			ws[uint64(k)*0x9e3779b97f4a7c15] = float64(1 + k%97)
		}
		sets[fmt.Sprintf("shoal-%d", m)] = NodeWeights{Incarnation: time.Now().UnixNano(), Version: 1 + uint64(m), Weights: ws}
	}
	first := sets["shoal-0"]
	next := NodeWeights{Incarnation: first.Incarnation, Version: first.Version + 1, Weights: maps.Clone(first.Weights)}
	for k := range next.Weights {
		if changed <= 0 {
			break
		}
		next.Weights[k] *= 2
		changed--
	}
	return len(encodeWeights(sets)), len(encodeWeightsSummary("shoal-0", sets)), len(encodeWeightsDelta(diffWeights("shoal-0", first, next)))
}
