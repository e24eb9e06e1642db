package handover

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/placement"
)

// Membership is what the Tracker follows (*cluster.Node).
type Membership interface {
	Peers() []cluster.Peer
	// Departed gives the last state of the members that left: the
	// tracker may wake only after a leaver's last update and its leave
	// have both been applied, and would otherwise miss that update.
	Departed() []cluster.Departure
	Subscribe() (<-chan struct{}, func())
}

// Tracker implements placement.Backlogs from the gossiped carries: a
// departed node's backlog is pending while a live node announces it, while
// its carrier is gone (crashed, restarting: it announces it again on start
// and sends it) for up to ttl, and for up to wait after a node that left
// terminating with unacknowledged samples and nobody announces its backlog:
// the announcement may still be on its way, or the hand-over failed and
// the data stayed on the leaver's storage, which a replica coming back on
// it (a StatefulSet pod) sends before anything newer. The hold that asks
// ends at --cluster.handoff-timeout anyway, so wait is that timeout.
type Tracker struct {
	m          Membership
	wait, ttl  time.Duration
	now        func() time.Time
	mu         sync.Mutex
	refreshed  time.Time
	alive      map[string]cluster.Peer
	last       map[string]cluster.Peer // last seen state of every node, alive or not
	goneAt     map[string]time.Time
	seen       map[uint64]seenCarry
	delivered  map[uint64]time.Time // carries withdrawn by a live carrier, when
	refreshGap time.Duration
	// local are the backlogs this node stores: pending whatever gossip
	// says (at start, before the first gossip, too).
	local []placement.Departed
	// own is the backlog this node's previous life handed over (nil:
	// none, or done with).
	own *handedOverBacklog
}

type seenCarry struct {
	carrier string
	at      time.Time // last seen announced
	acked   uint64    // Carry.Acked
}

// Defaults for NewTracker.
const (
	DefaultLeaverWait = 5 * time.Minute
	DefaultCarryTTL   = 10 * time.Minute
)

// NewTracker follows m; wait and ttl: see Tracker (0: the defaults).
func NewTracker(m Membership, wait, ttl time.Duration) *Tracker {
	if wait <= 0 {
		wait = DefaultLeaverWait
	}
	if ttl <= 0 {
		ttl = DefaultCarryTTL
	}
	return &Tracker{m: m, wait: wait, ttl: ttl, now: time.Now, refreshGap: 10 * time.Millisecond,
		alive: map[string]cluster.Peer{}, last: map[string]cluster.Peer{}, goneAt: map[string]time.Time{}, seen: map[uint64]seenCarry{}, delivered: map[uint64]time.Time{}}
}

// Run refreshes the view on every membership change until ctx ends, so
// that a node's state just before it left is known.
func (t *Tracker) Run(ctx context.Context) {
	if t.m == nil {
		return
	}
	ch, cancel := t.m.Subscribe()
	defer cancel()
	t.refresh(true)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			t.refresh(true)
		}
	}
}

func (t *Tracker) refresh(force bool) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil || (!force && now.Sub(t.refreshed) < t.refreshGap) {
		return
	}
	t.refreshed = now
	alive := map[string]cluster.Peer{}
	for _, p := range t.m.Peers() {
		alive[p.Name] = p
		t.last[p.Name] = p
		delete(t.goneAt, p.Name)
		for _, c := range p.Carried {
			t.seen[c.Of] = seenCarry{carrier: p.Name, at: now, acked: c.Acked}
		}
	}
	for _, d := range t.m.Departed() {
		name := d.Peer.Name
		if _, ok := alive[name]; ok {
			continue
		}
		if last, ok := t.last[name]; !ok || !d.Peer.StartTime.Before(last.StartTime) {
			t.last[name] = d.Peer
		}
		if at, ok := t.goneAt[name]; !ok || d.Left.Before(at) {
			t.goneAt[name] = d.Left
		}
	}
	for name := range t.last {
		if _, ok := alive[name]; ok {
			continue
		}
		if _, ok := t.goneAt[name]; !ok {
			t.goneAt[name] = now
		}
		if now.Sub(t.goneAt[name]) > t.ttl {
			delete(t.last, name)
			delete(t.goneAt, name)
		}
	}
	for key, s := range t.seen {
		p, ok := alive[s.carrier]
		switch {
		case ok && announces(p, key):
		case ok && p.State == cluster.Terminating:
			// Passed on as it leaves: the next carrier announces it
			// (and seen follows it), which may reach this node after
			// the withdrawal. Pending meanwhile, as for a gone carrier.
		case ok:
			delete(t.seen, key)
			t.delivered[key] = now
		case now.Sub(s.at) > t.ttl:
			delete(t.seen, key)
		}
	}
	for key, at := range t.delivered {
		if _, ok := t.seen[key]; ok || now.Sub(at) > t.ttl {
			delete(t.delivered, key)
		}
	}
	t.alive = alive
}

func announces(p cluster.Peer, key uint64) bool {
	for _, c := range p.Carried {
		if c.Of == key {
			return true
		}
	}
	return false
}

// setLocal records the backlogs this node stores.
func (t *Tracker) setLocal(ds []placement.Departed) {
	t.mu.Lock()
	t.local = ds
	t.mu.Unlock()
}

// Carried implements placement.Backlogs.
func (t *Tracker) Carried() []placement.Departed {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.local)
}

// Lives implements placement.Backlogs: the backlogs this node stores,
// and the lives of the nodes it remembers (gone within its TTL, or alive
// in its view, which may lag the caller's) whose backlog a carrier
// announces. A leaver whose backlog nobody announces is left out: a hold
// placed while it was alive waits for it (Pending's leaver wait), and one
// placed after it left would otherwise wait up to that wait for a
// hand-over that failed.
func (t *Tracker) Lives() []placement.Departed {
	t.refresh(false)
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Clone(t.local)
	for name, p := range t.last {
		if _, ok := t.seen[cluster.CarryKey(name, p.StartTime)]; ok {
			out = append(out, placement.Departed{Node: name, Start: p.StartTime, Seq: p.Handoff.LostSeq, Acked: p.Handoff.AckedSeq})
		}
	}
	return out
}

// Pending implements placement.Backlogs. The tracker follows membership on
// its own goroutine, so its view may be a moment behind the caller's (it
// has not seen the node leave) or ahead of it (it already sees the node
// back, restarted): where the two disagree about a node the caller finds
// gone, the answer is pending, and the caller's next look decides.
func (t *Tracker) Pending(node string, start time.Time, seq uint64, gone bool) bool {
	t.refresh(false)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range t.local {
		if d.Node == node && d.Start.Equal(start) {
			return !deliveredThrough(d.Acked, seq)
		}
	}
	key := cluster.CarryKey(node, start)
	if s, ok := t.seen[key]; ok {
		return !deliveredThrough(s.acked, seq)
	}
	if !gone {
		// Alive: its own acknowledgements are the caller's to wait for.
		return false
	}
	if _, ok := t.delivered[key]; ok {
		return false
	}
	p, ok := t.last[node]
	if !ok {
		return false
	}
	if _, alive := t.alive[node]; alive {
		return true
	}
	return t.now().Sub(t.goneAt[node]) < t.wait &&
		p.State == cluster.Terminating && p.StartTime.Equal(start) && p.Handoff.AckedSeq < seq
}

// deliveredThrough reports whether a backlog whose fences up to acked are
// delivered has delivered fence seq: a hold waiting for it need not wait
// for the rest (a hold that waits for no fence, seq 0, waits for all).
func deliveredThrough(acked, seq uint64) bool {
	return seq > 0 && acked >= seq
}
