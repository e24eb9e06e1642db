package remotewrite

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"

	"github.com/shoal-dev/shoal/wal"
)

// Hand-off support. When a target moves between nodes, the receiver must get
// the old owner's samples before the new owner's. The old owner asks its
// queues to send what they hold at once (FlushNow) and learns when they have
// (Acked); the new owner keeps its queues from sending anything written after
// it took the target over (Hold) until the old owner's samples are
// acknowledged. The policy (who waits for whom, and how long) lives in the
// placement package; this file is only the mechanism.

// handoff is the Manager's hand-off state, shared by its queues.
type handoff struct {
	mu    sync.Mutex
	holds map[*holdID]position

	// hold is the lowest held position, nil when nothing is held. Queues read
	// it for every record, so it is kept apart from mu.
	hold atomic.Pointer[position]
	// flushTo is the highest position a FlushNow asked for.
	flushTo atomic.Pointer[position]
}

// holdID tells holds apart.
type holdID struct{ _ byte }

// Hold makes every queue stop before p: no record that ends after p is sent
// until the returned release function is called (it is idempotent). Holds
// nest; the lowest one wins.
func (m *Manager) Hold(p wal.Position) (release func()) {
	h := &m.handoff
	id := &holdID{}
	h.mu.Lock()
	if h.holds == nil {
		h.holds = map[*holdID]position{}
	}
	h.holds[id] = position{Segment: p.Segment, Offset: p.Offset}
	h.recomputeLocked()
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.holds, id)
			h.recomputeLocked()
			h.mu.Unlock()
			m.Notify()
		})
	}
}

func (h *handoff) recomputeLocked() {
	var low *position
	for _, p := range h.holds {
		if low == nil || p.less(*low) {
			p := p
			low = &p
		}
	}
	h.hold.Store(low)
}

// blocks reports whether a record ending at end may not be sent yet.
func (h *handoff) blocks(end position) bool {
	if h == nil {
		return false
	}
	p := h.hold.Load()
	return p != nil && p.less(end)
}

// FlushNow makes every queue send what it has read up to p at once, instead
// of waiting for batch_send_deadline.
func (m *Manager) FlushNow(p wal.Position) {
	want := position{Segment: p.Segment, Offset: p.Offset}
	for {
		cur := m.handoff.flushTo.Load()
		if cur != nil && !cur.less(want) {
			break
		}
		if m.handoff.flushTo.CompareAndSwap(cur, &want) {
			break
		}
	}
	m.Notify()
}

// flushWanted reports whether a FlushNow asks for more than acked.
func (h *handoff) flushWanted(acked position) bool {
	if h == nil {
		return false
	}
	p := h.flushTo.Load()
	return p != nil && acked.less(*p)
}

// Acked reports whether every queue has had everything before p
// acknowledged (or dropped as bad data). It is false before the first
// configuration and while a queue has not opened the WAL yet, and true when
// no remote_write is configured.
func (m *Manager) Acked(p wal.Position) bool {
	if !m.configured.Load() {
		return false
	}
	want := position{Segment: p.Segment, Offset: p.Offset}
	for _, q := range *m.snapshot.Load() {
		a := q.hq.acked.Load()
		if a == nil || a.less(want) {
			return false
		}
	}
	return true
}

// queueHandoff is a queue's own hand-off state.
type queueHandoff struct {
	// acked mirrors queue.acked for Acked; nil until the WAL is open.
	acked atomic.Pointer[position]
	// stash is a record read past a hold: it is handed out again once the
	// hold is released. Owned by the run goroutine.
	stash *stashedRecord
}

type stashedRecord struct {
	rec      []byte
	seg      int
	sendable bool
	end      position // reader position after the record
	before   position // reader position before it
}

// publishAcked makes q.acked visible to Acked.
func (q *queue) publishAcked() {
	if a := q.hq.acked.Load(); a == nil || *a != q.acked {
		p := q.acked
		q.hq.acked.Store(&p)
	}
}

// nextRecord is reader.next that stops before a held position: a record
// ending past the hold is kept aside and reported as "nothing more for now".
func (q *queue) nextRecord(ctx context.Context) (rec []byte, seg int, sendable bool, err error) {
	if st := q.hq.stash; st != nil {
		if q.handoff.blocks(st.end) {
			return nil, 0, false, nil
		}
		q.hq.stash = nil
		return st.rec, st.seg, st.sendable, nil
	}
	before := q.reader.pos()
	rec, seg, sendable, err = q.reader.next(ctx)
	if err != nil || rec == nil {
		return rec, seg, sendable, err
	}
	if end := q.reader.pos(); q.handoff.blocks(end) {
		if seg != before.Segment {
			// The record opens a later segment: everything before its
			// start has been read. A hold at that start (a restarted
			// node's WAL end) must not keep the queue from acknowledging
			// a fence made there.
			before = position{Segment: seg}
		}
		q.hq.stash = &stashedRecord{rec: bytes.Clone(rec), seg: seg, sendable: sendable, end: end, before: before}
		return nil, 0, false, nil
	}
	return rec, seg, sendable, nil
}

// readPos is the position after the last record handed out by nextRecord.
func (q *queue) readPos() position {
	if st := q.hq.stash; st != nil {
		return st.before
	}
	return q.reader.pos()
}
