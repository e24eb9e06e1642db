package sim

import (
	"testing"

	"github.com/shoal-dev/shoal/cluster"
)

// listed is a member whose peer list the test sets.
type listed struct{ peers []cluster.Peer }

func (l *listed) Peers() []cluster.Peer { return l.peers }

// agreed answers true only when every member agrees at once: a member
// that agreed at an earlier poll and no longer does is asked again.
func TestAgreedNeedsEveryMemberAtOnce(t *testing.T) {
	yes, no := []cluster.Peer{{Name: "x"}}, []cluster.Peer(nil)
	nodes := []*listed{{yes}, {no}}
	cond := agreed(nodes, func(ps []cluster.Peer) bool { return len(ps) == 1 })
	if cond() {
		t.Fatal("agreed while the second member disagrees")
	}
	nodes[0].peers, nodes[1].peers = no, yes
	if cond() {
		t.Fatal("agreed while the first member, which agreed before, no longer does")
	}
	nodes[0].peers = yes
	if !cond() {
		t.Fatal("not agreed when every member agrees")
	}
}
