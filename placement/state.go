package placement

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/shoal-dev/shoal/internal/atomicfile"
	"github.com/shoal-dev/shoal/wal"
)

// The hand-off state on disk (Options.StatePath). Holds and fence marks
// point into this node's WAL, which outlives the process; kept in memory
// alone they did not: a node killed while a hold waited for a peer's
// backlog sent, in its next life, the held samples ahead of that backlog,
// and the remote end refused the older ones as out of order. So the
// Coordinator writes, at every change, its fence numbering, the fences
// not yet acknowledged and the holds in force, and a restart on the same
// storage takes them up again: the holds keep the queues back before they
// start, and the numbering goes on (Watermarks.Continued), so that peers
// holding for one of this node's earlier fences keep waiting for that
// fence by its number. Without that they would wait for the first fence
// of the new life, which lies after the restored holds: two nodes would
// each wait for the other until the hand-off timeout.

// stateVersion is savedState.Version; a file of another version is not
// read (the numbering starts afresh, as after losing the storage).
const stateVersion = 1

type savedState struct {
	Version   int    `json:"version"`
	FencedSeq uint64 `json:"fencedSeq"`
	LostSeq   uint64 `json:"lostSeq,omitempty"`
	AckedSeq  uint64 `json:"ackedSeq,omitempty"`
	// Clean: the life ended with its final fence acknowledged, so it
	// appended nothing after its last fence.
	Clean   bool        `json:"clean,omitempty"`
	Pending []savedMark `json:"pending,omitempty"`
	Holds   []savedHold `json:"holds,omitempty"`
}

type savedMark struct {
	Seq uint64       `json:"seq"`
	Pos wal.Position `json:"pos"`
}

type savedHold struct {
	Pos       wal.Position         `json:"pos"`
	Start     time.Time            `json:"start"`
	Due       time.Time            `json:"due"`
	NextUntil time.Time            `json:"nextUntil"`
	Need      map[string]savedNeed `json:"need,omitempty"`
}

type savedNeed struct {
	Seq    uint64    `json:"seq,omitempty"`
	Fenced uint64    `json:"fenced,omitempty"`
	Next   bool      `json:"next,omitempty"`
	First  bool      `json:"first,omitempty"`
	Start  time.Time `json:"start"`
}

// readState reads the state at path; ok is false when there is none.
func readState(path string) (st savedState, ok bool, err error) {
	if ok, err = atomicfile.ReadJSON(path, &st); !ok || err != nil {
		return st, false, err
	}
	if st.Version != stateVersion {
		return st, false, fmt.Errorf("%s: version %d, this build reads %d", path, st.Version, stateVersion)
	}
	return st, true, nil
}

// restoreState takes up the state of the previous life: called by New,
// before the queues start, so that no held record goes out in between.
// Restored holds are judged once the cluster is ready (step): before, the
// peers they wait for are not known yet and would count as gone.
func (c *Coordinator) restoreState() {
	st, ok, err := readState(c.opts.StatePath)
	if err != nil {
		c.logger.Warn("Cannot read the hand-off state of the previous run; fence numbering starts afresh and its holds are lost", "err", err)
		return
	}
	if !ok {
		return
	}
	c.fencedSeq, c.lostSeq, c.ackedSeq = st.FencedSeq, st.LostSeq, st.AckedSeq
	c.continued, c.unclean = true, !st.Clean
	for _, m := range st.Pending {
		c.pending = append(c.pending, fenceMark{seq: m.Seq, pos: m.Pos})
	}
	for _, sh := range st.Holds {
		c.holds = append(c.holds, sh.hold(c.remote.Hold(sh.Pos), c.opts.Backlogs))
	}
	c.metrics.fencedSeq.Set(float64(c.fencedSeq))
	c.metrics.ackedSeq.Set(float64(c.ackedSeq))
	c.metrics.holds.Set(float64(len(c.holds)))
	c.logger.Info("Took up the hand-off state of the previous run", "fenced_seq", c.fencedSeq, "acked_seq", c.ackedSeq,
		"unacknowledged_fences", len(c.pending), "holds", len(st.Holds))
}

// hold is sh taken up again, released by release; it is judged once the
// cluster is ready.
func (sh savedHold) hold(release func(), backlogs Backlogs) *hold {
	need := make(map[string]peerNeed, len(sh.Need))
	for name, n := range sh.Need {
		need[name] = peerNeed{seq: n.Seq, fenced: n.Fenced, next: n.Next, first: n.First, start: n.Start}
	}
	return &hold{pos: sh.Pos, start: sh.Start, due: sh.Due, nextUntil: sh.NextUntil,
		release: release, need: need, backlogs: backlogs, restored: true}
}

// stateLocked is what saveState writes; withCarried adds the holds
// holdForCarried placed (a leaving node's backlog carries them,
// LeavingState).
func (c *Coordinator) stateLocked(withCarried bool) savedState {
	st := savedState{Version: stateVersion, FencedSeq: c.fencedSeq, LostSeq: c.lostSeq, AckedSeq: c.ackedSeq,
		Clean: c.finalSeq != 0 && c.ackedSeq >= c.finalSeq}
	for _, m := range c.pending {
		st.Pending = append(st.Pending, savedMark{Seq: m.seq, Pos: m.pos})
	}
	for _, h := range c.holds {
		if h.carried && !withCarried {
			continue // holdForCarried places it anew from the backlogs on disk
		}
		sh := savedHold{Pos: h.pos, Start: h.start, Due: h.due, NextUntil: h.nextUntil, Need: map[string]savedNeed{}}
		for name, n := range h.need {
			sh.Need[name] = savedNeed{Seq: n.seq, Fenced: n.fenced, Next: n.next, First: n.first, Start: n.start}
		}
		st.Holds = append(st.Holds, sh)
	}
	return st
}

// saveState writes the hand-off state if it changed. Fenced, Activate,
// PublishAcked and step call it after each change; saveMu keeps an older
// copy from being written after a newer one.
func (c *Coordinator) saveState() {
	if c.opts.StatePath == "" {
		return
	}
	c.saveMu.Lock()
	defer c.saveMu.Unlock()
	c.mu.Lock()
	st := c.stateLocked(false)
	c.mu.Unlock()
	b, err := json.Marshal(st)
	if err != nil {
		c.logger.Error("Cannot encode the hand-off state", "err", err)
		return
	}
	if bytes.Equal(b, c.saved) {
		return
	}
	if err := atomicfile.Write(c.opts.StatePath, b); err != nil {
		if c.saveFailing == nil || c.saveFailing.Error() != err.Error() {
			c.logger.Warn("Cannot write the hand-off state; a restart would lose the holds in force", "path", c.opts.StatePath, "err", err)
		}
		c.saveFailing = err
		return
	}
	c.saveFailing = nil
	c.saved = b
}
