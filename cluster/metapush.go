package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Direct metadata pushes. memberlist spreads a node's metadata as an alive
// message through its gossip queue: a few rounds per hop, one update at a
// time per node (see broadcastState), and an update the queue drops waits
// for the next full state exchange. A new owner holds a gained target until
// every peer has announced its fence, so each of those delays is a gap at
// the receiver. So every metadata change is also sent at once, as a user
// packet, to every peer that says it reads such packets (featureMetaPush).
// The gossip stays the path that repairs a lost packet and reaches peers
// that joined later.
//
// Two paths can deliver one node's metadata out of order, so the metadata
// carries a sequence number (nodeMeta.Seq), counted up on every change
// within one life of the node: a peer keeps what it holds when the other
// path brings an older number of the same life.

const (
	// msgMeta is the kind byte of a metadata push: the sender's name
	// (uvarint length and bytes), then its metadata.
	msgMeta = 'm'
	// featureMetaPush in nodeMeta.Features says the node reads metadata
	// pushes. Nodes of older versions would count them as bad weights.
	featureMetaPush = 1 << 0
)

var errShortPush = errors.New("truncated metadata push")

func encodeMetaPush(name string, meta []byte) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(name)+len(meta))
	b = append(b, msgMeta)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	return append(b, meta...)
}

func decodeMetaPush(b []byte) (name string, meta []byte, err error) {
	if len(b) == 0 || b[0] != msgMeta {
		return "", nil, errors.New("not a metadata push")
	}
	b = b[1:]
	l, n := binary.Uvarint(b)
	if n <= 0 {
		return "", nil, errShortPush
	}
	b = b[n:]
	if l == 0 || l > uint64(len(b)) {
		return "", nil, errShortPush
	}
	return string(b[:l]), b[l:], nil
}

// kickMetaPush signals sendMetaLoop; it never blocks (pushes coalesce).
func (n *Node) kickMetaPush() {
	select {
	case n.metaSend <- struct{}{}:
	default:
	}
}

// sendMetaLoop pushes this node's metadata to every peer that reads pushes
// whenever it changes, until ctx ends. A lost packet is repaired by the
// gossip of the same update.
func (n *Node) sendMetaLoop(ctx context.Context) {
	n.sendOnChange(ctx, n.metaSend, "pushing metadata", n.metrics.metaPushes, n.pendingMetaLocked,
		func(ml *memberlist.Memberlist, a memberlist.Address, msg []byte) error {
			return ml.SendToAddress(a, msg)
		})
}

// pendingMetaLocked is the metadata push to send: none once the node
// leaves or stops.
func (n *Node) pendingMetaLocked() (outgoing, bool) {
	if n.left || n.stopped {
		return outgoing{}, false
	}
	meta := n.metaLocked()
	return outgoing{
		ml:      n.ml,
		version: n.metaSeq,
		msg:     func() []byte { return encodeMetaPush(n.cfg.NodeName, meta) },
		to:      n.peerAddrsLocked(func(p Peer) bool { return p.pushes }),
	}, true
}

// receiveMetaPush applies a peer's pushed metadata to the peer as this node
// already knows it; a push never adds a member (membership is memberlist's)
// nor brings news of another life of one.
func (n *Node) receiveMetaPush(b []byte) {
	name, meta, err := decodeMetaPush(b)
	if err != nil {
		n.metrics.badMeta.Inc()
		n.logger.Warn("peer pushed metadata this node cannot read; ignoring it", "err", err)
		return
	}
	if name == n.cfg.NodeName {
		return
	}
	m, st, err := decodeMeta(meta)
	if err != nil {
		n.metrics.badMeta.Inc()
		n.logger.Warn("peer pushed metadata this node cannot read; ignoring it", "peer", name, "err", err)
		return
	}
	n.apply(name, "", m, st, eventPush)
}

// earlyPush is a push from a member memberlist has not reported yet: a
// node that has just joined pushes its first states to every member it
// learned of in its join, and most of them hear of the join itself only by
// gossip, later. The newest such push is kept for earlyKeep and applied
// when memberlist reports the member, if it is of the life memberlist
// reports and newer than what memberlist brings. Membership stays
// memberlist's: a kept push adds no member.
type earlyPush struct {
	peer Peer
	meta nodeMeta
	at   time.Time
}

const (
	earlyKeep = 30 * time.Second
	earlyMax  = 1024 // pushes kept at most; past that, new ones are dropped
)

// keepEarlyPushLocked keeps p's pushed metadata until memberlist reports
// p, unless a push of the same life with a newer sequence is kept already.
func (n *Node) keepEarlyPushLocked(p Peer, m nodeMeta, st State) {
	if p.StartTime.IsZero() || p.Name == n.cfg.NodeName {
		return
	}
	now := time.Now()
	if e, ok := n.early[p.Name]; ok && e.peer.StartTime.Equal(p.StartTime) && e.peer.metaSeq >= p.metaSeq && now.Sub(e.at) <= earlyKeep {
		return
	}
	if _, ok := n.early[p.Name]; !ok && len(n.early) >= earlyMax {
		// Pruned only when full: a cold start of many members pushes to
		// each one before it is reported, and pruning on every push
		// would walk the whole map each time.
		for name, e := range n.early {
			if now.Sub(e.at) > earlyKeep {
				delete(n.early, name)
			}
		}
		if len(n.early) >= earlyMax {
			return
		}
	}
	p.State = st
	n.early[p.Name] = earlyPush{peer: p, meta: m, at: now}
}

// peerAddrsLocked lists the gossip addresses of the peers that want says
// to send to, by name. They come from this node's own record: memberlist's
// Members hands out nodes that its packet handler goes on updating.
func (n *Node) peerAddrsLocked(want func(Peer) bool) []memberlist.Address {
	var out []memberlist.Address
	for _, p := range n.peers {
		if want(p) {
			out = append(out, memberlist.Address{Addr: p.Addr, Name: p.Name})
		}
	}
	slices.SortFunc(out, func(a, b memberlist.Address) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// memberlistNode is the node memberlist's SendReliable wants for a.
func memberlistNode(a memberlist.Address) *memberlist.Node {
	host, port, _ := net.SplitHostPort(a.Addr)
	p, _ := strconv.Atoi(port)
	return &memberlist.Node{Name: a.Name, Addr: net.ParseIP(host), Port: uint16(p)}
}
