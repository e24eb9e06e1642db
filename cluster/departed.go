package cluster

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Departures. memberlist forgets a member the moment it reports it gone,
// but what the member said last still matters: a new owner holding its
// remote write for a leaver's last samples learns from the leaver's final
// state whether they were acknowledged (package handover). That state and
// the leave reach a peer by different paths, in either order or in one
// gossip packet, so the node keeps every departed member's last state for
// departedKeep, and a push of the same life arriving after the leave
// still updates it.

// Departure is a member memberlist reported gone.
type Departure struct {
	// Peer is the member's last state: its metadata when it left, or a
	// newer push of the same life that arrived after.
	Peer Peer
	// Left is when memberlist reported it gone.
	Left time.Time
}

const (
	// departedKeep is how long a departure is kept: past the hand-off
	// timeout's default, the longest anything waits for a leaver.
	departedKeep = 10 * time.Minute
	// departedMax bounds the record; past it the oldest departure goes.
	departedMax = 4096
)

// Departed lists the members that left within departedKeep and have not
// come back, by name.
func (n *Node) Departed() []Departure {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pruneDepartedLocked(time.Now())
	out := make([]Departure, 0, len(n.departed))
	for _, d := range n.departed {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Departure) int { return strings.Compare(a.Peer.Name, b.Peer.Name) })
	return out
}

// noteDepartureLocked records p's last state as it leaves.
func (n *Node) noteDepartureLocked(p Peer, now time.Time) {
	n.pruneDepartedLocked(now)
	if _, ok := n.departed[p.Name]; !ok && len(n.departed) >= departedMax {
		oldest := ""
		for name, d := range n.departed {
			if oldest == "" || d.Left.Before(n.departed[oldest].Left) {
				oldest = name
			}
		}
		delete(n.departed, oldest)
	}
	n.departed[p.Name] = Departure{Peer: p, Left: now}
}

func (n *Node) pruneDepartedLocked(now time.Time) {
	for name, d := range n.departed {
		if now.Sub(d.Left) > departedKeep {
			delete(n.departed, name)
		}
	}
}

// updateDepartureLocked applies a push from a departed member: it reports
// whether p is of the departed life, and whether it was newer and taken.
func (n *Node) updateDepartureLocked(p Peer) (sameLife, taken bool) {
	d, ok := n.departed[p.Name]
	if !ok || p.StartTime.IsZero() || !d.Peer.StartTime.Equal(p.StartTime) {
		return false, false
	}
	if p.metaSeq <= d.Peer.metaSeq {
		return true, false
	}
	p.Addr = d.Peer.Addr
	d.Peer = p
	n.departed[p.Name] = d
	return true, true
}

// finalPushParallel bounds the connections a leaving node opens at once.
const finalPushParallel = 16

// pushFinal sends this node's last metadata to every peer that reads pushes
// over memberlist's reliable (TCP) path before the node leaves: the leave
// notice replaces the update still queued in the gossip, the packet push
// may not have gone yet or may be lost, and a peer holding its remote write
// for this node's last samples would otherwise not learn that they were
// acknowledged. It returns when every peer has it or ctx ends; a send
// under way then ends within memberlist's TCP timeout, and Shutdown waits
// for it.
func (n *Node) pushFinal(ctx context.Context, ml *memberlist.Memberlist, out outgoing) {
	workers := min(finalPushParallel, len(out.to))
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return
	}
	// Under n.mu with stopped false: Shutdown's Wait comes after this Add.
	n.wg.Add(workers + 1)
	n.mu.Unlock()
	msg := out.msg()
	work := make(chan memberlist.Address)
	var sends sync.WaitGroup
	for range workers {
		sends.Add(1)
		go func() {
			defer n.wg.Done()
			defer sends.Done()
			for a := range work {
				if err := ml.SendReliable(memberlistNode(a), msg); err != nil {
					n.metrics.metaPushes.WithLabelValues("failure").Inc()
					n.logger.Debug("pushing the final metadata failed", "peer", a.Name, "err", err)
					continue
				}
				n.metrics.metaPushes.WithLabelValues("success").Inc()
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer n.wg.Done()
		defer close(done)
		sends.Wait()
	}()
feed:
	for _, a := range out.to {
		select {
		case work <- a:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	select {
	case <-done:
	case <-ctx.Done():
	}
}
