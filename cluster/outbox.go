package cluster

import (
	"context"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// outgoing is what a node has to send straight to its peers: a metadata
// push or its weight set, one version of it.
type outgoing struct {
	ml      *memberlist.Memberlist
	version uint64
	msg     func() []byte // built outside the node's lock
	to      []memberlist.Address
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
		msg := out.msg()
		for _, a := range out.to {
			if ctx.Err() != nil {
				return
			}
			if err := send(out.ml, a, msg); err != nil {
				results.WithLabelValues("failure").Inc()
				n.logger.Debug(what+" failed", "peer", a.Name, "err", err)
				continue
			}
			results.WithLabelValues("success").Inc()
		}
		sent = out.version
	}
}
