package handover

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/internal/atomicfile"
	"github.com/shoal-dev/shoal/placement"
)

// HandedOver records this node's own backlog as it left: handed to Peer,
// its fences up to Seq, from the life that started at Start. A replica
// started again on the same storage (a StatefulSet pod) scrapes the same
// targets again, and its newer samples would make the backlog's older ones
// out of order at the remote end if they got there first: it becomes a
// participant only once Peer has delivered the backlog.
type HandedOver struct {
	Node  string `json:"node"`
	Start int64  `json:"start"` // Unix milliseconds, as the carry key has it
	Seq   uint64 `json:"seq"`
	Peer  string `json:"peer"`
}

// handedOverFile is where the store keeps the record, beside the
// backlogs taken over.
const handedOverFile = "handed-over.json"

func (s *Store) setHandedOver(h HandedOver) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(s.dir, handedOverFile), b)
}

// handedOver reads the record; ok is false when there is none.
func (s *Store) handedOver() (h HandedOver, ok bool, err error) {
	ok, err = atomicfile.ReadJSON(filepath.Join(s.dir, handedOverFile), &h)
	return h, ok, err
}

func (s *Store) clearHandedOver() error {
	err := os.Remove(filepath.Join(s.dir, handedOverFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// takeUpHandedOver gives the tracker the backlog this node's previous
// life handed over, if any, before placement first asks about it. The
// record goes once the tracker is done with it.
func (s *Service) takeUpHandedOver() {
	h, ok, err := s.store.handedOver()
	if err != nil {
		s.logger.Warn("Cannot read which backlog the previous run handed over; not waiting for its delivery", "err", err)
		return
	}
	if !ok {
		return
	}
	d := placement.Departed{Node: h.Node, Start: time.UnixMilli(h.Start), Seq: h.Seq}
	s.tracker.setOwn(d, h.Peer, func(delivered bool) {
		if delivered {
			s.logger.Info("The backlog the previous run handed over is delivered", "peer", h.Peer)
		} else {
			s.logger.Warn("Stopped waiting for the backlog the previous run handed over; its samples may be refused as out of order", "peer", h.Peer, "waited", s.tracker.wait)
		}
		if err := s.store.clearHandedOver(); err != nil {
			s.logger.Warn("Cannot remove the record of the backlog handed over", "err", err)
		}
	})
	s.logger.Info("Waiting to scrape until the backlog the previous run handed over is delivered", "peer", h.Peer, "seq", h.Seq)
}

// handedOverBacklog is a HandedOver the tracker follows until its carrier has
// delivered it or the wait ran out; done runs once, then.
type handedOverBacklog struct {
	d    placement.Departed
	peer string
	// since is when placement first asked: the wait starts once this
	// node could take part, not while its WAL replays.
	since time.Time
	// quietSince is when the carrier was first seen alive, a participant,
	// without announcing the backlog, which it was never seen announcing.
	quietSince time.Time
	done       func(delivered bool)
}

// quietCarrierSettle is how long a carrier must be seen without the
// backlog it took, never having been seen announcing it, before the
// backlog counts as delivered: the first view of it may come from a peer
// whose copy of its metadata predates the announcement (an update lost
// from the gossip queue is repaired by the next push/pull, every 10 s).
const quietCarrierSettle = 25 * time.Second

// setOwn follows the backlog d this node's previous life handed to peer.
func (t *Tracker) setOwn(d placement.Departed, peer string, done func(delivered bool)) {
	t.mu.Lock()
	t.own = &handedOverBacklog{d: d, peer: peer, done: done}
	t.mu.Unlock()
}

// HandedOverWait implements placement.Backlogs. The carrier announces the
// backlog while it holds it. It has delivered it once a carrier seen
// announcing it withdraws it as a participant (one that withdraws it while
// terminating passes it on, and the next carrier announces it), or once
// the carrier has been seen as a participant without it for
// quietCarrierSettle. Until then, and while the carrier is not seen (this
// node has not joined yet, or the carrier is down), it may still be
// pending. Either way the wait ends after the leaver wait (the hand-off
// timeout), as a hold does.
func (t *Tracker) HandedOverWait() time.Duration {
	t.refresh(false)
	t.mu.Lock()
	o := t.own
	if o == nil {
		t.mu.Unlock()
		return 0
	}
	now := t.now()
	if o.since.IsZero() {
		o.since = now
	}
	left := o.since.Add(t.wait).Sub(now)
	delivered := t.ownDeliveredLocked(now)
	if !delivered && left > 0 {
		t.mu.Unlock()
		return left
	}
	t.own = nil
	t.mu.Unlock()
	if o.done != nil {
		o.done(delivered)
	}
	return 0
}

func (t *Tracker) ownDeliveredLocked(now time.Time) bool {
	o := t.own
	key := cluster.CarryKey(o.d.Node, o.d.Start)
	if s, ok := t.seen[key]; ok {
		o.quietSince = time.Time{}
		return deliveredThrough(s.acked, o.d.Seq)
	}
	if _, ok := t.delivered[key]; ok {
		return true
	}
	p, alive := t.alive[o.peer]
	if !alive || p.State != cluster.Participant {
		o.quietSince = time.Time{}
		return false
	}
	if o.quietSince.IsZero() {
		o.quietSince = now
	}
	return now.Sub(o.quietSince) >= quietCarrierSettle
}
