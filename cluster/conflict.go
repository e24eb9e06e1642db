package cluster

import (
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// Conflict is a node name claimed by two gossip addresses. memberlist keeps
// the first and ignores the other until the first leaves, so the second
// node is invisible to the ring: an operator must rename one.
type Conflict struct {
	Name         string
	ExistingAddr string // the address memberlist keeps
	OtherAddr    string // the address it ignores
	Time         time.Time
	// Self is true when the contested name is this node's own.
	Self bool
}

// LastConflict returns the most recent name conflict memberlist reported,
// if any. memberlist reports a conflict again with every gossip message of
// the ignored node, so a recent Time means the conflict still goes on.
func (n *Node) LastConflict() (Conflict, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.conflict, !n.conflict.Time.IsZero()
}

func (n *Node) noteConflict(existing, other *memberlist.Node) {
	c := Conflict{
		Name:         existing.Name,
		ExistingAddr: net.JoinHostPort(existing.Addr.String(), strconv.Itoa(int(existing.Port))),
		OtherAddr:    net.JoinHostPort(other.Addr.String(), strconv.Itoa(int(other.Port))),
		Time:         time.Now(),
		Self:         existing.Name == n.cfg.NodeName,
	}
	n.mu.Lock()
	n.conflict = c
	n.mu.Unlock()
}
