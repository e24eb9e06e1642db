package placement

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/shoal-dev/shoal/wal"
)

// A node that leaves with its remote-write queues behind a hold (it
// gained targets whose old owners' last samples were not acknowledged
// yet) hands its backlog to a peer (package handover). Sent at once, the
// backlog would deliver the gained targets' samples ahead of the old
// owners' older ones, and the remote end would refuse those as out of
// order. So the backlog carries the leaver's hand-off state (LeavingState):
// the peer that sends it keeps the same holds on the queues that send it
// (CarryHolds), judged as the leaver would have judged them, and tells the
// cluster how far the leaver's fences are delivered (CarriedHolds.AckedSeq),
// so that holds waiting for one of those fences go as soon as it is, not
// only once the whole backlog is.

// LeavingState is this node's hand-off state for the backlog it hands
// over: its fence numbering, the fences not yet acknowledged with their WAL
// positions, and every hold in force with what it waits for. A leaving node
// calls it once its queues have stopped.
func (c *Coordinator) LeavingState() ([]byte, error) {
	c.mu.Lock()
	st := c.stateLocked(true)
	c.mu.Unlock()
	return json.Marshal(st)
}

// HoldQueues are the queues that send a backlog taken over
// (*remotewrite.Manager).
type HoldQueues interface {
	Acked(p wal.Position) bool
	Hold(p wal.Position) (release func())
}

// CarriedHolds are a departed node's holds, kept on the queues that send
// its backlog. Its methods are safe for concurrent use.
type CarriedHolds struct {
	c     *Coordinator
	q     HoldQueues
	mu    sync.Mutex
	holds []*hold
	marks []fenceMark // not yet acknowledged, by seq
	acked uint64
}

// CarryHolds places the holds of a departed node's state (its
// LeavingState) on q, which must not have sent anything yet. An empty
// state carries no hold.
func (c *Coordinator) CarryHolds(state []byte, q HoldQueues) (*CarriedHolds, error) {
	ch := &CarriedHolds{c: c, q: q}
	if len(state) == 0 {
		return ch, nil
	}
	var st savedState
	if err := json.Unmarshal(state, &st); err != nil {
		return ch, fmt.Errorf("placement: the hand-off state of a backlog taken over: %w", err)
	}
	ch.acked = st.AckedSeq
	for _, m := range st.Pending {
		ch.marks = append(ch.marks, fenceMark{seq: m.Seq, pos: m.Pos})
	}
	for _, sh := range st.Holds {
		ch.holds = append(ch.holds, sh.hold(q.Hold(sh.Pos), c.opts.Backlogs))
	}
	return ch, nil
}

// Step releases the holds whose peers have all acknowledged what they
// wait for, or are gone, and those past their timeout, and moves AckedSeq
// on; it returns how many holds remain. The caller polls it while the
// backlog is sent.
func (ch *CarriedHolds) Step() (holds int) {
	c := ch.c
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if n := ackedMarks(ch.marks, ch.q); n > 0 {
		ch.acked = ch.marks[n-1].seq
		ch.marks = ch.marks[n:]
	}
	if len(ch.holds) == 0 {
		return 0
	}
	peers := c.alivePeers()
	now := c.now()
	keep, done, expired := judgeHolds(ch.holds, peers, now, c.cl.Ready())
	ch.holds = keep
	c.endHolds(longHolds(keep, now), done, expired, peers, now)
	return len(keep)
}

// AckedSeq is the departed node's last fence whose samples are delivered:
// a hold waiting for that fence or an earlier one need not wait for the
// rest of the backlog.
func (ch *CarriedHolds) AckedSeq() uint64 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.acked
}

// Close releases the holds left: the backlog is no longer sent from here.
func (ch *CarriedHolds) Close() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, h := range ch.holds {
		h.release()
	}
	ch.holds = nil
}
