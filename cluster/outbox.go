package cluster

import (
	"context"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// outgoing is what a node has to send straight to its peers: a metadata
// push or its weight set, one version of it. Peers in legacy get
// legacyMsg instead of msg (weight sets to peers that do not read deltas).
type outgoing struct {
	ml        *memberlist.Memberlist
	version   uint64
	msg       func() []byte // built outside the node's lock
	to        []memberlist.Address
	legacyMsg func() []byte
	legacy    []memberlist.Address
}

// sendOnChange is the loop behind every direct send: on each kick it asks
// pending (under n.mu) what there is to send and sends it to each peer,
// once per version, until ctx ends. Kicks coalesce, so a burst of changes
// sends only the last. A failed send is counted and left to the slower path
// (gossip for metadata, push/pull for weights) to repair.
func (n *Node) sendOnChange(ctx context.Context, kick <-chan struct{}, what string, results *prometheus.CounterVec,
	pending func() (outgoing, bool), send func(*memberlist.Memberlist, memberlist.Address, []byte) error) {
	var sent uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
		n.mu.Lock()
		out, ok := pending()
		n.mu.Unlock()
		if !ok || out.ml == nil || out.version == sent {
			continue
		}
		n.sendTo(ctx, out.ml, out.to, out.msg, what, results, send)
		n.sendTo(ctx, out.ml, out.legacy, out.legacyMsg, what, results, send)
		if ctx.Err() != nil {
			return
		}
		sent = out.version
	}
}

// sendTo sends msg() to every address in to, counting each result.
func (n *Node) sendTo(ctx context.Context, ml *memberlist.Memberlist, to []memberlist.Address, msg func() []byte, what string,
	results *prometheus.CounterVec, send func(*memberlist.Memberlist, memberlist.Address, []byte) error) {
	if len(to) == 0 {
		return
	}
	b := msg()
	for _, a := range to {
		if ctx.Err() != nil {
			return
		}
		if err := send(ml, a, b); err != nil {
			results.WithLabelValues("failure").Inc()
			n.logger.Debug(what+" failed", "peer", a.Name, "err", err)
			continue
		}
		results.WithLabelValues("success").Inc()
	}
}
