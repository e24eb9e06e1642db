// Package gate decides when a node starts the targets it gained in a
// hand-off: never before the node has announced its own fence of the view
// they were gained under; then at once, once every peer has fenced that
// view too (released), or after --cluster.handoff-delay, unless a peer that
// follows another placement may still scrape them (contested). It keeps
// the gained targets that wait, their due times, and counts the delays
// that expired.
//
// It is the placement package's decision, kept in a package of its own
// that depends on nothing else in shoal but internal/promreg: the
// placement Coordinator answers its questions about peers (Peers), and the
// scrape filter, which computes the candidates from discovery and the
// ring, applies its answers without knowing anything of peers. Being a
// leaf, it can be tested rule by rule, and the scrape filter's own tests
// can run it as it runs in production.
package gate

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/internal/promreg"
)

// Move tells whether a candidate's series was scraped before under another
// key that is gone now (a reload or relabelling changed its URL), and by
// whom.
type Move uint8

const (
	// NotMoved: gained by a ring or view change, or discovered anew.
	NotMoved Move = iota
	// MovedHere: this node alone scraped it under its old key; it goes on
	// scraping it under the new one at once.
	MovedHere
	// MovedFromPeer: a peer may still scrape it under its old key; it is a
	// hand-off like any other.
	MovedFromPeer
)

// Candidate is a target key this node owns under the current view and does
// not scrape at this rank yet.
type Candidate struct {
	Key  uint64
	Rank int
	// Known: the key was discovered at the previous re-filter (a target a
	// peer may scrape) rather than new.
	Known bool
	Move  Move
	// Placed: the target's owners are the placement's owners of Key (it
	// is sharded by the ring, not node-local nor scraped by every node),
	// so a contending peer's placement tells whether that peer may own
	// it (see Peers.Contested).
	Placed bool
}

// Peers answers, for the view a set of candidates was gained under, what
// the gate needs to know of the peers. Each answer is asked for at most
// once per Admit.
type Peers interface {
	// Fenced: this node has announced its own fence of the view. Until it
	// has, nothing starts (see Admit).
	Fenced() bool
	// Released: every peer that may still scrape targets gained under
	// the view has fenced it.
	Released() bool
	// Contested: c, which waited out the delay without Released and has
	// waited since since (the first Admit after this node fenced the view
	// it was gained under, kept across later views while it waits), must
	// wait on: a peer that follows another placement generation may own it
	// there and still scrape it. It is asked per candidate, so that a
	// target waits only for the peers that may scrape it, not for the
	// slowest peer of the cluster. recheck is when the answer may change
	// without a change being signalled (zero: not before); the caller
	// asks again then (Admission.Next), or on a change.
	Contested(c Candidate, since time.Time) (contested bool, recheck time.Time)
}

// Admission is the gate's answer to Admit.
type Admission struct {
	// Start[i] tells whether cands[i] starts now; the others wait.
	Start []bool
	// Next is when the earliest waiting candidate falls due (zero: none,
	// or only contested ones past their due, which wait for a new Admit).
	Next time.Time
	// Waiting is how many candidates wait.
	Waiting int
}

// Gate holds gained targets back until they may start. Create it with New.
// It is safe for concurrent use, though one caller (the scrape filter's
// re-filter) is expected.
type Gate struct {
	delay    time.Duration
	logger   *slog.Logger
	timeouts prometheus.Counter
	group    *promreg.Group

	mu sync.Mutex
	// waiting are the candidates held back at the last Admit.
	waiting map[uint64]wait
	// config is the view's configuration at the last Admit: a candidate
	// that moved under the same one moved by discovery alone.
	config uint64
}

// wait is a held-back candidate.
type wait struct {
	due  time.Time
	rank int
	// fixed: only due ends the wait. A target whose key moved without a
	// configuration change (discovery changed its URL) cannot be released
	// by the peers' fences, which say nothing about discovery.
	fixed bool
	// deferred: gained before this node fenced the view, and not decided
	// yet (deferAll); move is its Move then, which the filter knows only
	// in the pass that first sees the new key.
	deferred bool
	move     Move
}

// New returns a Gate that holds gained targets back for at most delay
// (--cluster.handoff-delay, which must be positive: the placement package
// owns its default) and registers its metric on reg (nil: none; Close
// unregisters it).
func New(delay time.Duration, logger *slog.Logger, reg prometheus.Registerer) (*Gate, error) {
	if delay <= 0 {
		return nil, fmt.Errorf("hand-off gate: delay %v is not positive", delay)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	g := &Gate{
		delay:  delay,
		logger: logger,
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_handoff_delay_expired_total",
			Help: "Gained targets started because --cluster.handoff-delay passed before every peer had fenced them.",
		}),
		waiting: map[uint64]wait{},
	}
	grp, err := promreg.Register(reg, g.timeouts)
	if err != nil {
		return nil, fmt.Errorf("hand-off gate metrics: %w", err)
	}
	g.group = grp
	return g, nil
}

// Close unregisters the metric.
func (g *Gate) Close() { g.group.Unregister() }

// Delay is the longest a gained target waits for Released.
func (g *Gate) Delay() time.Duration { return g.delay }

// Admit decides, at now, which of cands start. config identifies the view
// they were gained under (its scrape configuration); peers answers for that
// view. Every call replaces the set of waiting candidates: a key no longer
// among cands stops waiting.
//
// Nothing starts before this node has announced its own fence of the view
// (Peers.Fenced). A started target's remote-write hold (placement) must lie
// after the samples of the targets this node lost in the same change: a
// peer that gained those holds until they are acknowledged, and if this
// node's hold were in front of them while it waited for that peer's
// samples in turn, the two queues would wait for each other until the
// hand-off timeout. Fencing takes at most scrape.StopWait; the peers'
// fences, which a target waits for anyway, take as long.
func (g *Gate) Admit(now time.Time, config uint64, cands []Candidate, peers Peers) Admission {
	if !peers.Fenced() {
		return g.deferAll(now, cands)
	}
	p := &onceAnswers{peers: peers}
	res := Admission{Start: make([]bool, len(cands))}
	timedOut := 0
	g.mu.Lock()
	cfgChanged := config != g.config
	waiting := make(map[uint64]wait)
	for i, c := range cands {
		var (
			start, expired bool
			w              wait
			recheck        time.Time
		)
		old, ok := g.waiting[c.Key]
		ok = ok && old.rank == c.Rank
		if ok && !old.deferred {
			w = old
			start, expired, recheck = decideWaiting(c, old, now, g.delay, p)
		} else {
			if ok {
				c.Move = old.move
			}
			start, w = decideGained(c, now, g.delay, cfgChanged, p)
		}
		res.Start[i] = start
		if expired {
			timedOut++
		}
		if !start {
			waiting[c.Key] = w
			// A contested target past its due waits for a new Admit,
			// not a timer, unless its answer changes at a known time.
			res.Next = earliest(res.Next, w.due, now)
			res.Next = earliest(res.Next, recheck, now)
		}
	}
	g.waiting, g.config = waiting, config
	res.Waiting = len(waiting)
	g.mu.Unlock()
	if timedOut > 0 {
		g.timeouts.Add(float64(timedOut))
		g.logger.Warn("Started gained targets after --cluster.handoff-delay without every peer having fenced them",
			"targets", timedOut, "delay", g.delay)
	}
	return res
}

// deferAll is Admit's answer before this node has fenced the view: every
// candidate waits. A candidate that already waited keeps its wait; the
// others are decided, as they were first seen, by the first Admit after
// the fence, which counts their delay from then. The view's configuration
// is not taken over, so that Admit still sees it change. Next is a safety
// net only: the fence's announcement signals the filter to ask again.
func (g *Gate) deferAll(now time.Time, cands []Candidate) Admission {
	res := Admission{Start: make([]bool, len(cands)), Waiting: len(cands), Next: now.Add(g.delay)}
	g.mu.Lock()
	defer g.mu.Unlock()
	waiting := make(map[uint64]wait, len(cands))
	for _, c := range cands {
		if w, ok := g.waiting[c.Key]; ok && w.rank == c.Rank {
			waiting[c.Key] = w
			continue
		}
		waiting[c.Key] = wait{rank: c.Rank, deferred: true, move: c.Move}
	}
	g.waiting = waiting
	return res
}

// earliest is the earlier of next and t, counting only times after now
// (a zero next is none).
func earliest(next, t, now time.Time) time.Time {
	if !t.After(now) || (!next.IsZero() && !t.Before(next)) {
		return next
	}
	return t
}

// decideWaiting is the rule for a candidate that already waits: it starts
// once released (unless only its due may end the wait), or at its due
// (expired) unless contested, in which case it waits on for a new Admit
// (at recheck, if the answer changes then). The wait began delay before
// its due.
func decideWaiting(c Candidate, w wait, now time.Time, delay time.Duration, p Peers) (start, expired bool, recheck time.Time) {
	overdue := !now.Before(w.due)
	if !w.fixed && p.Released() {
		return true, false, time.Time{}
	}
	if overdue && !w.fixed {
		if contested, at := p.Contested(c, w.due.Add(-delay)); contested {
			return false, false, at
		}
	}
	return overdue, overdue, time.Time{}
}

// decideGained is the rule for a candidate that does not wait yet. A
// target moved from a peer's key waits for that peer: with a new
// configuration its fence of the view releases the target, a key moved by
// discovery alone (cfgChanged false) waits the whole delay. One this node
// alone scraped under its old key goes on at once. Any other waits until
// every peer has fenced the view, unless they already have.
func decideGained(c Candidate, now time.Time, delay time.Duration, cfgChanged bool, p Peers) (bool, wait) {
	switch {
	case c.Move == MovedFromPeer:
		return false, wait{due: now.Add(delay), rank: c.Rank, fixed: !cfgChanged}
	case c.Move == MovedHere:
		return true, wait{}
	case !p.Released():
		return false, wait{due: now.Add(delay), rank: c.Rank}
	default:
		return true, wait{}
	}
}

// onceAnswers asks each of peers' view-wide questions at most once per
// Admit; Contested, asked per candidate, goes straight through.
type onceAnswers struct {
	peers    Peers
	released *bool
}

func (o *onceAnswers) Fenced() bool { return o.peers.Fenced() }

func (o *onceAnswers) Released() bool {
	if o.released == nil {
		r := o.peers.Released()
		o.released = &r
	}
	return *o.released
}

func (o *onceAnswers) Contested(c Candidate, since time.Time) (bool, time.Time) {
	return o.peers.Contested(c, since)
}
