// Package placement turns cluster membership into target ownership and
// orders the hand-off of targets between nodes.
//
// Two placement modes (Options.Placement): ModeRing, the plain
// consistent-hash ring, and ModeBounded, bounded-load consistent hashing
// over the per-target weights every node publishes through the cluster
// (weights.go): each node measures the targets it scrapes as primary,
// publishes their smoothed samples/s, and places the union of everyone's
// weights so that no node carries more than 1.10 times the mean. Both give
// the filter a scrape.Placement; a change of either (membership, or a
// weight) is a new generation, fenced and released as a whole.
//
// The Coordinator follows the membership (a viewer becomes a participant
// once the cluster is ready; a terminating node leaves the ring), builds the
// ring in one place (buildRing) and offers it to the ownership filter as its
// View. It implements scrape.Handoff, and owns every decision of the
// hand-off; the filter computes keys and ranks, applies the decisions and
// reports what it did. The Coordinator never holds the filter: it signals
// Changes, and the filter reads View and asks Admit again.
//
//   - Losing side: the filter fences lost targets at the appender
//     (scrape.Fence); the Coordinator then numbers the fence, notes the WAL
//     end, asks the remote-write queues to send up to it at once, and gossips
//     "fenced seq/ring" and, once the queues have acknowledged that position,
//     "acked seq".
//   - Gaining side: the gate (package placement/gate, through Admit) starts
//     a gained target when every live peer, viewers included, has fenced
//     the view it was gained under (Released: the ring and the scrape
//     configuration, ViewID), or after --cluster.handoff-delay, unless a
//     participating peer follows another placement generation (Contested):
//     then it waits until that peer fences this one or leaves, at most
//     --cluster.handoff-timeout. On start (Activate) the Coordinator holds
//     the remote-write queues at the WAL end until every peer that stopped
//     targets has acknowledged the last fence that stopped any, made before
//     the hold (a peer that had not fenced the view: its next fence, unless
//     that stopped nothing, for at most the hand-off delay), so that two
//     holding nodes never wait for each other; or the peer is gone, or
//     --cluster.handoff-timeout passes. So the receiver gets the old owner's
//     samples first.
//
// The gate waits for every live peer rather than for the previous owners of
// each target: simpler and still sound, since a peer that owned nothing of
// it fences at once, and bounded by the hand-off delay. The hold, which a
// slow queue can stretch to the hand-off timeout, waits only for the peers
// that stopped targets.
package placement

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/placement/gate"
	"github.com/shoal-dev/shoal/ring"
	"github.com/shoal-dev/shoal/scrape"
	"github.com/shoal-dev/shoal/wal"
)

// Defaults for Options.
const (
	// DefaultHandoffDelay is --cluster.handoff-delay's default, the one
	// place it is written (the flag shows it).
	DefaultHandoffDelay   = 2 * time.Second
	DefaultHandoffTimeout = 5 * time.Minute
	DefaultTerminateGrace = 5 * time.Second
	// ackPoll is how often pending fences are checked against the queues'
	// acknowledged position; it bounds how late "acked seq" is gossiped.
	ackPoll = 20 * time.Millisecond
	// handedOverPoll is how often a node waiting for the backlog its
	// previous life handed over asks again: Backlogs follows membership on
	// its own goroutine, and the change that woke this node may not have
	// reached it yet.
	handedOverPoll = time.Second
	// holdWarnAfter is how long a hold may last before it is logged with
	// what it waits for: holds normally last milliseconds, and one that
	// lasts holds every sample this node writes.
	holdWarnAfter = 30 * time.Second
)

// Cluster is the membership the Coordinator follows (*cluster.Node).
type Cluster interface {
	Self() cluster.Peer
	// Peers returns the alive members, self included; dead and left ones
	// are not listed.
	Peers() []cluster.Peer
	Subscribe() (<-chan struct{}, func())
	SetState(cluster.State) error
	SetWatermarks(cluster.Watermarks)
	// SetScrapeConfig publishes the scrape configuration ids (config.go).
	SetScrapeConfig(cluster.ConfigIDs)
	// SetWeights publishes this node's per-target weights and Weights
	// returns every alive node's last published set (ModeBounded only).
	SetWeights(map[uint64]float64)
	Weights() map[string]cluster.NodeWeights
	Ready() bool
	WaitReady(ctx context.Context) error
	// UpdateBound is how long a node's metadata update may take to reach
	// every alive peer when its direct push is lost (gossip repairs it).
	UpdateBound() time.Duration
}

// Fencer stops and restarts appends of hand-off units (*scrape.Fence).
type Fencer interface {
	Fence(ctx context.Context, units []scrape.Unit) error
	Unfence(units []scrape.Unit)
}

// WAL tells where the write-ahead log ends (*wal.Storage).
type WAL interface {
	EndPosition() (wal.Position, error)
}

// Remote is the remote-write side (*remotewrite.Manager).
type Remote interface {
	FlushNow(p wal.Position)
	Acked(p wal.Position) bool
	Hold(p wal.Position) (release func())
}

// Options configures a Coordinator. Zero values take the defaults.
type Options struct {
	NodeName          string
	Tokens            int // tokens per node; 0: ring.DefaultTokensPerNode
	ReplicationFactor int // 0: 1
	// HandoffDelay is --cluster.handoff-delay, the gate's wait for the
	// peers' fences (Delay): a hold placed for targets that some peer had
	// not fenced waits for that peer's next fence only this long (see
	// Activate). 0 means DefaultHandoffDelay.
	HandoffDelay time.Duration
	// HandoffTimeout bounds how long the remote-write queues are held for
	// peers whose last samples of moved targets are not acknowledged yet,
	// and how long gained targets wait past the hand-off delay for a peer
	// that follows another placement generation (see Contested).
	HandoffTimeout time.Duration
	// TerminateGrace bounds how long Terminate waits for this node's last
	// samples to be acknowledged before shutdown goes on.
	TerminateGrace time.Duration
	// Placement is ModeBounded or ModeRing; "" means DefaultMode.
	Placement string
	// WeightPolicy turns measurements into published weights (ModeBounded);
	// zero fields take ring.DefaultWeightPolicy's.
	WeightPolicy ring.WeightPolicy
	// WeightPeriod is how often weights are published (ModeBounded); 0
	// means DefaultWeightPeriod.
	WeightPeriod time.Duration
	// Backlogs, when set, extends holds to backlogs handed over by peers
	// that left (package handover); nil: a peer that is gone is not
	// waited for.
	Backlogs Backlogs
	// StatePath is the file that keeps the fence numbering, the fences not
	// acknowledged yet and the holds in force across restarts (state.go);
	// "" keeps them in memory only.
	StatePath string
}

// Backlogs tells whether a departed peer's unsent samples live on
// elsewhere, undelivered: a peer that left with a backlog may have handed
// it to another node (package handover), whose delivery the new owners of
// the peer's targets must wait for as they would for the peer's own.
type Backlogs interface {
	// Pending reports whether node's backlog from the life that started
	// at start, up to its fence seq, is held by some node and not yet
	// delivered, or may still be announced by one. gone: node is absent
	// from the membership the caller decides on. seq 0 asks about the
	// whole backlog.
	Pending(node string, start time.Time, seq uint64, gone bool) bool
	// Carried lists the departed nodes' backlogs this node itself holds,
	// undelivered.
	Carried() []Departed
	// Lives lists the lives of nodes whose backlog is held by some node
	// (Seq: their last fence that stopped targets): announced by a
	// carrier, or stored by this one. A hold asks Pending about those
	// absent from the membership it is placed under: a node may leave
	// before this node starts the targets it left, its backlog still on
	// its way to the receiver through another node.
	Lives() []Departed
	// HandedOverWait is how much longer, at most, this node waits before
	// it becomes a participant for the backlog its previous life handed
	// over as it stopped (a replica started again on the same storage
	// scrapes the same targets, and its newer samples must not reach the
	// remote end first); 0 when there is nothing to wait for.
	HandedOverWait() time.Duration
}

// Departed names a life of a node that left, the last fence of it and
// the last one whose samples are delivered (Acked, 0: none known).
type Departed struct {
	Node  string
	Start time.Time
	Seq   uint64
	Acked uint64
}

// need is what a hold waits for of a departed life: its backlog up to
// its last fence, wherever it is (Backlogs.Pending); such a life makes no
// next fence.
func (d Departed) need() peerNeed {
	return peerNeed{seq: d.Seq, start: d.Start}
}

func (o Options) withDefaults() Options {
	if o.ReplicationFactor < 1 {
		o.ReplicationFactor = 1
	}
	if o.HandoffDelay == 0 {
		o.HandoffDelay = DefaultHandoffDelay
	}
	if o.HandoffTimeout <= 0 {
		o.HandoffTimeout = DefaultHandoffTimeout
	}
	if o.TerminateGrace <= 0 {
		o.TerminateGrace = DefaultTerminateGrace
	}
	if o.Placement == "" {
		o.Placement = DefaultMode
	}
	if o.WeightPeriod <= 0 {
		o.WeightPeriod = DefaultWeightPeriod
	}
	return o
}

// Coordinator follows the cluster and orders hand-offs. Create it with New,
// give it to the ownership filter as its scrape.Handoff, and run Run.
type Coordinator struct {
	opts    Options
	cl      Cluster
	fence   Fencer
	wal     WAL
	remote  Remote
	logger  *slog.Logger
	metrics *metrics
	kick    chan struct{}
	now     func() time.Time
	weigher *weigher   // nil in ModeRing
	gate    *gate.Gate // holds gained targets back (Admit)

	// publishMu orders watermark publications: each re-reads the latest
	// watermarks under mu, so an older copy never overwrites a newer one.
	publishMu sync.Mutex

	// changes is scrape.Handoff's Changes: signalled when the view or the
	// gate's answers may have changed.
	changes chan struct{}

	mu      sync.Mutex
	view    scrape.View // what the filter places by (View), of generation viewGen
	viewGen uint64
	ring    scrape.Placement
	ringKey string // participants, self state and weights of ring, to skip no-op updates
	// ringInputs are the weights and their publishers the sticky
	// placement ring was built from; a change waits (inputsDueLocked):
	// the last one seen, when it came, and since when changes are pending.
	ringInputs, inputsSeen     uint64
	inputsChanged, inputsSince time.Time
	ringSets                   map[string]cluster.NodeWeights // the sets ring was built from
	// pubRing and pubSets are the placement and sets (setsDigest) this
	// node's weights were last published for (publishWeights).
	pubRing     scrape.Placement
	pubSets     uint64
	ringPeers   []string // ModeBounded: the participants that keep the cluster on the ring
	modeLogged  bool     // ModeBounded: the placement mode has been logged once
	publishDue  bool     // ModeBounded: apply the WeightPolicy at the next update
	terminating bool
	fencedAny   bool // Fence was called since the last Fenced
	fencedSeq   uint64
	fencedRing  uint64
	fencedGen   uint64 // RingID of the placement of fencedSeq
	lostSeq     uint64 // the last fence that stopped targets (Watermarks.LostSeq)
	ackedSeq    uint64
	finalSeq    uint64      // the fence made as a non-participant while terminating
	pending     []fenceMark // fences not acknowledged yet, oldest first
	holds       []*hold
	ackedCh     chan struct{} // closed and replaced when ackedSeq moves
	continued   bool          // the numbering goes on from the previous life (Watermarks.Continued)
	// waitsHandedOver: Run keeps this node a viewer for the backlog its
	// previous life handed over (WaitsForHandedOver).
	waitsHandedOver bool
	// unclean: the previous life ended without its final fence
	// acknowledged, so it may have scraped after its last fence: the
	// first fence of this life counts as one that stopped targets.
	unclean bool
	// The generation whose gained targets Contested keeps back past the
	// hand-off delay (0: none), since when, and whether the hand-off
	// timeout has ended that wait.
	contestGen     uint64
	contestSince   time.Time
	contestExpired bool
	// built are the latest placements this node built, newest last (at
	// most placementsKept), for a contending peer's (contenders).
	built []builtPlacement
	// joinSeqs is each peer's fence sequence when this life turned
	// participant (nil before): what a peer announced until then may
	// name the ring this node is on without being a fence of it
	// (joinSeqs.announcedSince).
	joinSeqs joinSeqs
	// cfg is the scrape configuration agreement (config.go).
	cfg configState

	// saveMu orders saveState's writes; saved is the last content
	// written, saveFailing the last write error (logged once).
	saveMu      sync.Mutex
	saved       []byte
	saveFailing error
}

type fenceMark struct {
	seq uint64
	pos wal.Position
}

// ackedMarks is how many of marks, oldest first, q has acknowledged.
func ackedMarks(marks []fenceMark, q interface{ Acked(wal.Position) bool }) int {
	n := 0
	for n < len(marks) && q.Acked(marks[n].pos) {
		n++
	}
	return n
}

type hold struct {
	pos        wal.Position // where the queues stop
	start, due time.Time
	// nextUntil ends the wait for next fences (peerNeed.next): the hand-off
	// delay after the hold was placed.
	nextUntil time.Time
	release   func()
	// need is, per peer, the fence whose samples must be acknowledged
	// before the hold goes: the peer's last fence that stopped targets
	// when the hold was placed (Watermarks.LostSeq). A peer's samples of a
	// target it no longer scrapes all lie before the fence that stopped
	// it, and a fence that stopped nothing hands nothing over, so peers
	// that stopped nothing since their last acknowledgement are not in
	// need: a hold waits for the peers that handed targets over, not for
	// every peer. Only fences made before the hold are waited for, so every
	// wait points back in time and two holding nodes can never wait for
	// each other (a fence's acknowledgement waits for the holds placed
	// before it). The one exception is bounded: a peer that had not fenced
	// the hold's view is waited for until it acknowledges its next fence,
	// or announces that the fence stopped nothing, but only until
	// nextUntil.
	need map[string]peerNeed
	// backlogs is Options.Backlogs (nil: none).
	backlogs Backlogs
	// warned is set once the hold was logged as long (holdWarnAfter).
	warned bool
	// restored: taken up from the previous life's state, judged only once
	// the cluster is ready. carried: placed by holdForCarried, which
	// places it anew at every start, so it is not saved.
	restored, carried bool
}

type peerNeed struct {
	seq    uint64    // the peer's last fence that stopped targets, before the hold (≤ fenced)
	fenced uint64    // the peer's last fence before the hold
	next   bool      // it was not of the hold's view: until nextUntil, fenced+1 is waited for
	start  time.Time // the peer's start time: a restarted peer is not waited for
	// first: the peer had restarted on its storage and not fenced yet in
	// this life. Its previous life's samples lie before its first fence
	// of this one, which comes before any hold of this life, so
	// waiting for it points back in time: fenced+1 is waited for past
	// nextUntil.
	first bool
}

// New returns a Coordinator. reg may be nil.
func New(opts Options, cl Cluster, fence Fencer, w WAL, remote Remote, logger *slog.Logger, reg prometheus.Registerer) (*Coordinator, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cl == nil || fence == nil || w == nil || remote == nil {
		return nil, errors.New("placement: cluster, fence, WAL and remote write are required")
	}
	if opts.HandoffDelay < 0 {
		return nil, fmt.Errorf("placement: negative hand-off delay %v (0 means the default, %v)", opts.HandoffDelay, DefaultHandoffDelay)
	}
	opts = opts.withDefaults()
	if !slices.Contains(Modes, opts.Placement) {
		return nil, fmt.Errorf("placement: unknown placement mode %q (want one of %v)", opts.Placement, Modes)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	g, err := gate.New(opts.HandoffDelay, logger, reg)
	if err != nil {
		m.group.Unregister()
		return nil, err
	}
	c := &Coordinator{
		gate:    g,
		opts:    opts,
		cl:      cl,
		fence:   fence,
		wal:     w,
		remote:  remote,
		logger:  logger,
		metrics: m,
		kick:    make(chan struct{}, 1),
		changes: make(chan struct{}, 1),
		now:     time.Now,
		ackedCh: make(chan struct{}),
	}
	if opts.Placement == ModeBounded {
		c.weigher = newWeigher(opts.WeightPolicy, opts.WeightPeriod, func() time.Time { return c.now() })
	}
	if opts.StatePath != "" {
		c.restoreState()
	}
	if opts.Backlogs != nil {
		c.holdForCarried(opts.Backlogs.Carried())
	}
	return c, nil
}

// holdForCarried holds this node's whole WAL until the backlogs it carries
// at start are delivered. In its previous life it may have taken over the
// departed nodes' targets and held their samples behind those backlogs;
// holds live in memory, so after a restart the queues would send those
// samples first and the remote end would refuse the older ones of the
// backlog as out of order. New runs before the queues start.
func (c *Coordinator) holdForCarried(ds []Departed) {
	if len(ds) == 0 {
		return
	}
	need := map[string]peerNeed{}
	for _, d := range ds {
		need[d.Node] = d.need()
	}
	now := c.now()
	c.holds = append(c.holds, &hold{start: now, due: now.Add(c.opts.HandoffTimeout), nextUntil: now,
		release: c.remote.Hold(wal.Position{}), need: need, backlogs: c.opts.Backlogs, carried: true})
	c.metrics.holds.Set(float64(len(c.holds)))
	c.logger.Info("Holding the remote-write queues until the backlogs taken over before the restart are delivered", "backlogs", len(ds), "timeout", c.opts.HandoffTimeout)
}

// Close unregisters the metrics.
func (c *Coordinator) Close() {
	c.metrics.group.Unregister()
	c.gate.Close()
}

// Changes implements scrape.Handoff: it is signalled when View or the
// gate's answers may have changed.
func (c *Coordinator) Changes() <-chan struct{} { return c.changes }

// View implements scrape.Handoff: the placement last built, and its
// generation (0 until Run has built one).
func (c *Coordinator) View() (scrape.View, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.view, c.viewGen
}

func (c *Coordinator) notify() {
	select {
	case c.changes <- struct{}{}:
	default:
	}
}

// Ring returns the hash ring under the placement of the last view (nil
// before the first).
func (c *Coordinator) Ring() *ring.Ring {
	c.mu.Lock()
	defer c.mu.Unlock()
	return scrape.RingOf(c.ring)
}

// Placement returns the placement of the last view (nil before the
// first).
func (c *Coordinator) Placement() scrape.Placement {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ring
}

func (c *Coordinator) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// RingID identifies a placement generation: a ring by its participant set,
// a bounded-load placement by its participants and the weights it placed.
// It is the same on every node that sees the same state, and never zero
// ("not fenced yet").
func RingID(r scrape.Placement) uint64 {
	if g, ok := r.(interface{ generation() uint64 }); ok {
		return g.generation()
	}
	return ringID(r)
}

func ringID(r scrape.Placement) uint64 {
	if r == nil {
		r = (*ring.Ring)(nil)
	}
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString("shoal-ring\xff")
	for _, n := range r.Nodes() {
		_, _ = d.WriteString(n)
		_, _ = d.WriteString("\xff")
	}
	return nonZero(d.Sum64())
}

// buildRing is the one place where membership becomes a ring: every
// participant, with the configured tokens.
func buildRing(peers []cluster.Peer, tokens int) *ring.Ring {
	var participants []string
	for _, p := range peers {
		if p.State == cluster.Participant {
			participants = append(participants, p.Name)
		}
	}
	return ring.New(participants, tokens)
}

// buildBounded places the published weights u on the participants' ring
// with bounded loads, starting from the current owners (the publishers in
// sets, ring.NewSticky) when sticky (every participant does so,
// placesSticky).
// Then its generation is its result: a publication that moves no target
// is not a new generation to hand off. Otherwise (a participant of an
// older version, which places with ring.NewBounded) it places as that
// version does, and its generation covers the participants and the
// weights.
func buildBounded(peers []cluster.Peer, tokens, rf int, u map[uint64]float64, digest uint64, sets map[string]cluster.NodeWeights, departedOnly []uint64, sticky bool) *bounded {
	r := buildRing(peers, tokens)
	if sticky {
		b := ring.NewSticky(r, ownedLoads(u, sets, departedOnly), 0, rf)
		return &bounded{Bounded: b, id: nonZero(b.Digest() ^ stickySalt), sticky: true}
	}
	id := nonZero(ringID(r) ^ (digest * 0x9e3779b97f4a7c15))
	return &bounded{Bounded: ring.NewBounded(r, loads(u), 0, rf), id: id}
}

// nonZero keeps a generation id off 0, which means "not fenced yet".
func nonZero(id uint64) uint64 {
	if id == 0 {
		return 1
	}
	return id
}

// stickySalt keeps a sticky placement's generation apart from a plain
// ring's and an older version's, which hash other inputs.
const stickySalt = 0x5ac4e1d7a9b3f201

// Run follows membership until ctx is done: it promotes this node from
// viewer to participant once the cluster is ready, rebuilds the ring when
// participants change, publishes this node's acknowledged fences and
// releases holds.
func (c *Coordinator) Run(ctx context.Context) {
	changes, unsubscribe := c.cl.Subscribe()
	defer unsubscribe()
	if c.continued {
		// Peers holding for one of this node's fences of the life before
		// compare its numbers from now on.
		c.publishWatermarks()
	}
	readyc := make(chan struct{})
	go func() {
		defer close(readyc)
		_ = c.cl.WaitReady(ctx)
	}()
	defer func() { <-readyc }()
	waiting := (<-chan struct{})(readyc)
	// Publications fall on multiples of the period on the wall clock, so
	// that nodes started together publish together: one new placement
	// rather than one per node, each moving targets.
	var (
		publish  *time.Timer
		publishC <-chan time.Time
	)
	nextPublish := func() time.Duration {
		now := c.now()
		return now.Truncate(c.opts.WeightPeriod).Add(c.opts.WeightPeriod).Sub(now)
	}
	if c.weigher != nil {
		publish = time.NewTimer(nextPublish())
		defer publish.Stop()
		publishC = publish.C
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var handedOver time.Duration
		if waiting == nil && c.cl.Self().State == cluster.Viewer && !c.isTerminating() {
			// The caller runs Run once the configuration is loaded and the
			// WAL replayed, and the cluster is ready: this node may own
			// targets, once what its previous life handed over is delivered.
			handedOver = min(c.handedOverWait(), handedOverPoll)
			c.mu.Lock()
			c.waitsHandedOver = handedOver > 0
			c.mu.Unlock()
			if handedOver == 0 {
				c.recordJoinSeqs()
				if err := c.cl.SetState(cluster.Participant); err != nil {
					c.logger.Warn("Announcing participant state failed", "err", err)
				}
			}
		}
		c.updateRing()
		c.step()
		var timerC <-chan time.Time
		if d := sooner(c.nextWake(), handedOver); d > 0 {
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			timerC = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-c.kick:
		case <-timerC:
		case <-waiting:
			waiting = nil
		case <-publishC:
			c.mu.Lock()
			c.publishDue = true
			c.mu.Unlock()
			publish.Reset(nextPublish())
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// handedOverWait is Backlogs.HandedOverWait (0 without Backlogs).
func (c *Coordinator) handedOverWait() time.Duration {
	if c.opts.Backlogs == nil {
		return 0
	}
	return c.opts.Backlogs.HandedOverWait()
}

// WaitsForHandedOver reports whether this node stays a viewer until a
// peer has delivered the backlog its previous life handed over
// (Backlogs.HandedOverWait), as of its last look.
func (c *Coordinator) WaitsForHandedOver() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitsHandedOver
}

func (c *Coordinator) isTerminating() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.terminating
}

// updateRing builds a new view for the filter when the participants, this
// node's state or (ModeBounded) the published weights changed, and signals
// Changes either way (otherwise a peer's watermarks may have moved, and
// the gate may release held-back targets). With ModeBounded it then publishes this node's weights: adopting
// those of targets it has just become primary of at once, applying the
// WeightPolicy once per WeightPeriod.
func (c *Coordinator) updateRing() {
	for range 3 {
		if !c.updateOnce() {
			return
		}
	}
}

// updateOnce is one step of updateRing; it reports whether this node's
// published weights changed, which changes the placed set again.
func (c *Coordinator) updateOnce() bool {
	peers := c.cl.Peers()
	self := c.cl.Self()
	// Participants that cannot place targets by the configuration the
	// cluster agrees on are left off the ring.
	agreed, placeBy := c.agreeOn(peers)
	peers = agreed.placers(peers)
	participant := self.State == cluster.Participant && c.cl.Ready() && !agreed.isAside(c.opts.NodeName)
	key := fmt.Sprintf("%v\xff%016x", participant, placeBy)
	kube := map[string]string{}
	for _, p := range peers {
		if p.State == cluster.Participant {
			key += "\xff" + p.Name + "\xfe" + p.KubeNode
			if p.KubeNode != "" {
				kube[p.Name] = p.KubeNode
			}
		}
	}
	var (
		sets            map[string]cluster.NodeWeights
		u               map[uint64]float64
		digest          uint64
		departedOnly    []uint64
		bounded, sticky bool
	)
	var setsID uint64 // setsDigest(sets): who published which version
	if c.weigher != nil {
		sets = c.cl.Weights()
		setsID = setsDigest(sets)
		bounded = c.boundedAgreed(peers, sets)
	}
	key += fmt.Sprintf("\xffbounded=%v", bounded)
	// inputs: what a sticky placement is built from besides the
	// participants, the weights and who publishes them.
	var inputs uint64
	if bounded {
		u, digest, departedOnly = c.weigher.union(sets, setsID)
		if sticky = placesSticky(peers); sticky {
			key += "\xffsticky"
			inputs = digest ^ setsID*0x9e3779b97f4a7c15
		} else {
			key += fmt.Sprintf("\xff%016x", digest) // as older versions do, at once
		}
	}
	c.mu.Lock()
	full := c.publishDue
	c.publishDue = false
	if key == c.ringKey && !c.inputsDueLocked(inputs, sets) {
		r := c.ring
		c.mu.Unlock()
		c.notify() // a peer's watermarks may have moved: the gate may answer anew
		return c.publishWeights(r, u, sets, setsID, full)
	}
	var r scrape.Placement
	if bounded {
		b := buildBounded(peers, c.opts.Tokens, c.opts.ReplicationFactor, u, digest, sets, departedOnly, sticky)
		c.metrics.setPlaced(b, c.opts.NodeName, len(u))
		c.logger.Debug("New bounded-load placement", "generation", fmt.Sprintf("%016x", b.id), "sticky", b.sticky, "placed", len(u), "weights", fmt.Sprintf("%016x", digest), "participants", b.Nodes(), "sets", setsSummary(sets))
		r = b
	} else {
		r = buildRing(peers, c.opts.Tokens)
	}
	view := scrape.View{Placement: r, Self: c.opts.NodeName, ReplicationFactor: c.opts.ReplicationFactor,
		Participant: participant, KubeNodes: kube, PlaceBy: placeBy}
	same := c.viewGen != 0 && sameView(c.view, view)
	c.ring, c.ringKey, c.ringInputs, c.ringSets, c.inputsSince = r, key, inputs, sets, time.Time{}
	c.rememberLocked(r)
	c.view = view
	if !same {
		c.viewGen++
	}
	c.mu.Unlock()
	c.notify() // unchanged, the gate may still answer anew
	return c.publishWeights(r, u, sets, setsID, full)
}

// inputsQuiet and inputsWait bound how long a change of the weights or of
// who publishes them waits before the sticky placement is built again: see
// inputsDueLocked.
const (
	inputsQuiet = 500 * time.Millisecond
	inputsWait  = 5 * time.Second
)

// inputsDueLocked reports whether a sticky placement must be built again
// now although its participants are the same: the weights or their
// publishers (inputs) changed, and have been quiet for inputsQuiet since
// their last change, or have kept changing for inputsWait, or a
// publication contradicts this node's placement. Publications come in
// bursts, one per node, arriving one after another: every node publishes
// its weights at the same multiple of the period, and after a view change
// every node that gained targets adopts their weights and every node that
// lost them stops. Built from each, every node placed every target once
// per publication, and the half-published states in between could move
// targets back and forth (placed again from its own owners, a sticky
// placement is a fixed point: adoptions alone change nothing). Waiting
// for the burst to settle builds once from where it ends. A node that
// adopts a target this node places elsewhere, or drops one this node
// places on it, placed differently: then their gained targets wait
// (Contested) until the two agree, so that is built at once.
func (c *Coordinator) inputsDueLocked(inputs uint64, sets map[string]cluster.NodeWeights) bool {
	if inputs == c.ringInputs {
		c.inputsSince = time.Time{}
		return false
	}
	if !publicationsFollow(c.ring, c.ringSets, sets) {
		return true
	}
	now := c.now()
	if inputs != c.inputsSeen || c.inputsSince.IsZero() {
		c.inputsSeen, c.inputsChanged = inputs, now
		if c.inputsSince.IsZero() {
			c.inputsSince = now
		}
	}
	return !now.Before(c.inputsDueAtLocked())
}

// inputsDueAtLocked is when a pending change of inputs is built (zero:
// none pending).
func (c *Coordinator) inputsDueAtLocked() time.Time {
	if c.inputsSince.IsZero() {
		return time.Time{}
	}
	quiet, wait := c.inputsChanged.Add(inputsQuiet), c.inputsSince.Add(inputsWait)
	if wait.Before(quiet) {
		return wait
	}
	return quiet
}

// publicationsFollow reports whether every publisher that changed since
// before follows placement r: the keys it added are ones r places on it as
// primary, the keys it dropped ones r places elsewhere.
func publicationsFollow(r scrape.Placement, before, sets map[string]cluster.NodeWeights) bool {
	if r == nil {
		return false
	}
	var buf [1]string
	primary := func(k uint64, name string) bool {
		o := r.Owners(k, 1, buf[:0])
		return len(o) == 1 && o[0] == name
	}
	for name, s := range sets {
		old, ok := before[name]
		if ok && old.Incarnation == s.Incarnation && old.Version == s.Version {
			continue
		}
		for k := range s.Weights {
			if _, had := old.Weights[k]; !had && !primary(k, name) {
				return false
			}
		}
		for k := range old.Weights {
			if _, has := s.Weights[k]; !has && primary(k, name) {
				return false
			}
		}
	}
	return true
}

// sameView reports whether the filter would place every target of b as it
// does by a: a placement built again with the same result (its generation)
// is not a new view to re-filter and hand off.
func sameView(a, b scrape.View) bool {
	return RingID(a.Placement) == RingID(b.Placement) && slices.Equal(a.Placement.Nodes(), b.Placement.Nodes()) &&
		a.Self == b.Self && a.ReplicationFactor == b.ReplicationFactor && a.Participant == b.Participant &&
		a.PlaceBy == b.PlaceBy && maps.Equal(a.KubeNodes, b.KubeNodes)
}

// publishWeights publishes this node's weights under placement r, built
// from the union u of sets; it reports whether they changed.
func (c *Coordinator) publishWeights(r scrape.Placement, u map[uint64]float64, sets map[string]cluster.NodeWeights, setsID uint64, full bool) bool {
	if _, ok := r.(*bounded); c.weigher == nil || !ok {
		return false // ModeRing, or the cluster places on the ring (boundedAgreed)
	}
	if !c.cl.Ready() {
		// Before it has joined, a node sees only itself: whether the
		// cluster agrees on bounded loads is not known yet.
		return false
	}
	// Between full publications, what this node publishes follows the
	// placement and the sets alone: every membership event asks again
	// (watermarks move all through a hand-off), and going over every
	// target each time cost more than placing them.
	c.mu.Lock()
	same := !full && r == c.pubRing && setsID == c.pubSets
	c.pubRing, c.pubSets = r, setsID
	c.mu.Unlock()
	if same {
		return false
	}
	mine := c.weigher.publish(r, c.opts.NodeName, u, publishedByOthers(sets, c.opts.NodeName), full)
	// The first publication goes out even empty: it replaces what peers
	// still hold from this node's previous life.
	if old, ok := sets[c.opts.NodeName]; ok && maps.Equal(old.Weights, mine) {
		return false
	}
	c.cl.SetWeights(mine)
	c.metrics.published.Set(float64(len(mine)))
	return true
}

// Measured implements scrape.Meter: ModeBounded weighs the targets this
// node scrapes by what their scrapes append.
func (c *Coordinator) Measured(u scrape.Unit, samples int, interval time.Duration) {
	if c.weigher != nil {
		c.weigher.measured(u, samples, interval)
	}
}

// NodeLoad is what the placement in force puts on one node.
type NodeLoad struct {
	// Load is the sum of the published weights (samples/s) placed on the
	// node; Limit is what every node is held to (1.10 × the mean). Both
	// are zero in ModeRing.
	Load, Limit float64
}

// Loads returns the placement mode in force (ModeRing while the cluster
// places on the ring, whatever this node runs) and, with ModeBounded, each
// participant's placed load; MeasuredRate is this node's own measured
// samples/s of the targets it scrapes as primary.
func (c *Coordinator) Loads() (mode string, loads map[string]NodeLoad, measuredRate float64) {
	c.mu.Lock()
	r := c.ring
	c.mu.Unlock()
	b, ok := r.(*bounded)
	if !ok || b == nil {
		return ModeRing, nil, 0
	}
	loads = map[string]NodeLoad{}
	for _, n := range b.Nodes() {
		loads[n] = NodeLoad{Load: b.Load(n), Limit: b.Limit()}
	}
	return ModeBounded, loads, c.weigher.selfRate()
}

// Terminate takes this node off the ring and waits, for at most the
// terminate grace, until its last samples are acknowledged, so that the new
// owners' holds end before this node goes.
func (c *Coordinator) Terminate() {
	c.mu.Lock()
	c.terminating = true
	c.mu.Unlock()
	if err := c.cl.SetState(cluster.Terminating); err != nil {
		c.logger.Warn("Announcing terminating state failed", "err", err)
	}
	c.mu.Lock()
	c.ringKey = ""
	c.mu.Unlock()
	c.updateRing()
	c.wake()
	deadline := time.NewTimer(c.opts.TerminateGrace)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		done := c.finalSeq != 0 && c.ackedSeq >= c.finalSeq
		ch := c.ackedCh
		c.mu.Unlock()
		if done {
			c.logger.Info("Targets handed off to peers and their last samples acknowledged")
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			c.logger.Warn("Last samples of handed-off targets not acknowledged within the terminate grace period; shutting down anyway (the flush goes on)", "grace", c.opts.TerminateGrace)
			return
		}
	}
}

// Fence implements scrape.Handoff.
func (c *Coordinator) Fence(ctx context.Context, units []scrape.Unit) error {
	c.mu.Lock()
	c.fencedAny = true
	c.mu.Unlock()
	return c.fence.Fence(ctx, units)
}

// ViewID identifies what a fence is made under: the ring and the scrape
// configuration (scrape.ConfigID; 0 for none, which gives RingID(r)). It is
// what the "fenced ring" watermark carries: a reload that changes a target's
// URL moves its key without changing the ring, and the gaining node must
// know that the peers have applied the same configuration and fenced.
func ViewID(r scrape.Placement, config uint64) uint64 {
	id := RingID(r)
	if config == 0 {
		return id
	}
	var d xxhash.Digest
	d.Reset()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], id)
	binary.LittleEndian.PutUint64(b[8:], config)
	_, _ = d.Write(b[:])
	return nonZero(d.Sum64())
}

// Fenced implements scrape.Handoff: it numbers the fence, asks the queues to
// send everything before it now, and gossips it.
func (c *Coordinator) Fenced(r scrape.Placement, config uint64, participant bool) {
	if r == nil {
		return // clustering disabled
	}
	id := ViewID(r, config)
	c.mu.Lock()
	if id == c.fencedRing && !c.fencedAny && (participant || c.finalSeq != 0 || !c.terminating) {
		c.mu.Unlock()
		return
	}
	pos, err := c.wal.EndPosition()
	if err != nil {
		c.mu.Unlock()
		c.logger.Warn("Cannot read the WAL end position; not announcing the fence", "err", err)
		return
	}
	c.fencedSeq++
	c.fencedRing = id
	if c.fencedAny || c.unclean {
		c.lostSeq = c.fencedSeq
	}
	c.fencedAny, c.unclean = false, false
	if c.terminating && !participant {
		c.finalSeq = c.fencedSeq
	}
	c.fencedGen = RingID(r)
	c.pending = append(c.pending, fenceMark{seq: c.fencedSeq, pos: pos})
	wm := c.watermarksLocked()
	c.mu.Unlock()
	c.metrics.fencedSeq.Set(float64(wm.FencedSeq))
	c.remote.FlushNow(pos)
	c.publishWatermarks()
	// Saved after the announcement: lost in a crash in between, the next
	// life gives this number to a later fence, which covers more.
	c.saveState()
	c.notify() // targets gained under r may start now (the gate's Fenced)
	c.wake()
}

// publishWatermarks gossips this node's current watermarks. Fenced (the
// filter's goroutine) and step (Run's) both publish; reading the watermarks
// inside publishMu keeps one that read them earlier from publishing them
// after the other's newer ones.
func (c *Coordinator) publishWatermarks() {
	c.publishMu.Lock()
	defer c.publishMu.Unlock()
	c.mu.Lock()
	wm := c.watermarksLocked()
	c.mu.Unlock()
	c.cl.SetWatermarks(wm)
}

func (c *Coordinator) watermarksLocked() cluster.Watermarks {
	return cluster.Watermarks{FencedSeq: c.fencedSeq, FencedRing: c.fencedRing, AckedSeq: c.ackedSeq, FencedPlacement: c.fencedGen, LostSeq: c.lostSeq, Continued: c.continued, Final: c.finalSeq != 0}
}

// Admit implements scrape.Handoff: the gate decides which gained targets
// start, asking Released and Contested of the view r and config.
func (c *Coordinator) Admit(now time.Time, r scrape.Placement, config uint64, cands []gate.Candidate) gate.Admission {
	return c.gate.Admit(now, config, cands, &viewPeers{c: c, r: r, config: config, now: now})
}

// viewPeers answers the gate's questions for one view, during one Admit:
// it finds the contenders once, at the first candidate that asks.
type viewPeers struct {
	c      *Coordinator
	r      scrape.Placement
	config uint64
	now    time.Time
	who    []contender
	bound  time.Duration // the cluster's UpdateBound, when who is not empty
	asked  bool
}

func (v *viewPeers) Fenced() bool   { return v.c.selfFenced(v.r, v.config) }
func (v *viewPeers) Released() bool { return v.c.Released(v.r, v.config) }

// Contested relies on the contenders' announcements to tell which targets
// they may own only once cand has waited the cluster's update bound (see
// contender); before, every contender holds it, and the gate asks again
// when the bound has passed.
func (v *viewPeers) Contested(cand gate.Candidate, since time.Time) (bool, time.Time) {
	if !v.asked {
		v.who, v.asked = v.c.contenders(v.r, v.config), true
		if len(v.who) > 0 {
			v.bound = v.c.cl.UpdateBound()
		}
	}
	if len(v.who) == 0 {
		return false, time.Time{}
	}
	trusted := since.Add(v.bound)
	if v.now.Before(trusted) {
		return true, trusted
	}
	return contests(v.who, cand, v.c.opts.ReplicationFactor), time.Time{}
}

// Released reports whether every live peer that may scrape has fenced r
// under the same scrape configuration (the gate's release), since this
// node turned participant. Dead or left nodes are not waited for, nor is
// a terminating node past its final fence: it scrapes nothing more, and
// fences no later view.
func (c *Coordinator) Released(r scrape.Placement, config uint64) bool {
	id, old := ViewID(r, config), RingID(r)
	joined := c.joinedAt()
	for _, p := range c.peersToWaitFor() {
		if !pastFinalFence(p) && !(fencedView(p, id, old) && joined.announcedSince(p)) {
			return false
		}
	}
	return true
}

// recordJoinSeqs notes every peer's fence sequence as this node turns
// participant, before the peers can hear of it.
func (c *Coordinator) recordJoinSeqs() {
	seqs := joinSeqs{}
	for _, p := range c.peersToWaitFor() {
		seqs[p.Name] = p.Handoff.FencedSeq
	}
	c.mu.Lock()
	c.joinSeqs = seqs
	c.mu.Unlock()
}

// joinSeqs is each peer's fence sequence when this life turned
// participant, by peer name.
type joinSeqs map[string]uint64

// joinedAt is the peers' fence sequences when this life turned
// participant (recordJoinSeqs); the map is replaced, never changed.
func (c *Coordinator) joinedAt() joinSeqs {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.joinSeqs
}

// announcedSince reports whether p's fence announcement is newer than
// the one it had made when this life turned participant. A ring is named
// by its members' names, so once this node's previous life has left and
// this one has joined, the ring has the name it had before the leave, and
// a peer's fence from before the leave reads as a fence of it. The new
// life learns its peers' state from memberlist's state exchange, which
// carries what memberlist has gossiped, not the pushes, so it may hold
// that old fence for a while. A peer can fence a ring in which this node
// takes part only after hearing that it does, so a fence of it announced
// before is that older ring's. Peers not known then count as announced
// since.
func (j joinSeqs) announcedSince(p cluster.Peer) bool {
	seq, known := j[p.Name]
	return !known || p.Handoff.FencedSeq > seq
}

// selfFenced reports whether this node's last announced fence is of the
// view r under config (the gate starts nothing gained under it before).
func (c *Coordinator) selfFenced(r scrape.Placement, config uint64) bool {
	id := ViewID(r, config)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fencedRing == id
}

// Delay is --cluster.handoff-delay, the gate's bound.
func (c *Coordinator) Delay() time.Duration { return c.gate.Delay() }

// contender is a peer that contests targets gained under a view: it
// follows another placement generation. placement is that generation's,
// when this node built it too and the peer places by the same scrape
// configuration (then the peer may scrape only what it owns there); nil
// when it cannot be told (then every target may be the peer's).
//
// The placement is relied on only for a target that has waited the
// cluster's UpdateBound since this node began to own it (viewPeers'
// Contested). A peer's announcement may hide a newer one whose push was
// lost, made under a placement this node never saw (two membership
// changes seen in other orders), under which the peer owns a target this
// node is about to start. Such a peer started it only after waiting the
// bound itself, while this node's announcements, which all gave this node
// the target since it began to own it, had not reached it. Each side
// relying on announcements only after the bound, each would have had the
// other's by then: a target is scraped twice only if an update takes
// longer than the bound. The bound is counted per target, not per
// generation, so that a stream of changes (a rolling restart's) does not
// restart it.
type contender struct {
	name      string
	placement scrape.Placement
}

// contenders are the peers (for the gate's Contested) for whom targets
// gained under r that waited out the hand-off delay without Released must
// wait on, because such a peer that takes part (participant or terminating) announces a last fence
// of another placement generation. The gate asks per target
// (viewPeers' Contested, then contests): a target waits only for the peers that may
// own it under their own generation. Under its placement that peer may own
// any of them and still scrape it: started now, such a target would be
// scraped twice and the receiver would refuse one node's samples (a whole
// request of them with most receivers). The wait ends when every such peer
// has fenced r's generation, has left, is a viewer (a viewer's fences are
// made owning nothing), or has made its final fence (terminating, it
// fences no later view while its queues flush), and at the latest --cluster.handoff-timeout
// after it began (counted and logged), so that a peer whose view never
// converges cannot stop targets for good. Peers that announce no
// generation (none fenced yet, or an older version) and peers on r's
// generation under another scrape configuration do not hold targets past
// the delay: the former can tell nothing, the latter own only what a
// reload moves (see ViewID), as before. A peer whose last fence of r's
// generation it announced before this node turned participant is a
// contender too: that may be a fence of an older ring of the same name
// (joinSeqs.announcedSince). Past the update bound its announcement is
// relied on like any other, so a peer that has nothing to fence since
// holds no target for longer.
//
// It returns none once --cluster.handoff-timeout has ended the contest,
// and counts and logs when a contest begins and when it times out.
func (c *Coordinator) contenders(r scrape.Placement, config uint64) []contender {
	gen := RingID(r)
	joined := c.joinedAt()
	var lagging []cluster.Peer
	for _, p := range c.peersToWaitFor() {
		if p.State == cluster.Viewer || pastFinalFence(p) || p.Handoff.FencedPlacement == 0 ||
			(p.Handoff.FencedPlacement == gen && joined.announcedSince(p)) {
			continue
		}
		lagging = append(lagging, p)
	}
	now := c.now()
	c.mu.Lock()
	if len(lagging) == 0 {
		c.contestGen = 0
		c.mu.Unlock()
		return nil
	}
	started := c.contestGen != gen
	if started {
		c.contestGen, c.contestSince, c.contestExpired = gen, now, false
	}
	who := make([]contender, len(lagging))
	for i, p := range lagging {
		who[i] = contender{name: p.Name}
		if config != 0 && placesBy(p) == shortID(config) {
			who[i].placement = c.builtLocked(p.Handoff.FencedPlacement)
		}
	}
	expired := !now.Before(c.contestSince.Add(c.opts.HandoffTimeout))
	gaveUp := expired && !c.contestExpired
	if gaveUp {
		c.contestExpired = true
	}
	c.mu.Unlock()
	switch {
	case started:
		c.metrics.contested.Inc()
		c.logger.Info("Gained targets wait past --cluster.handoff-delay: peers follow another placement generation and may still scrape them",
			"generation", fmt.Sprintf("%016x", gen), "peers", peerNames(lagging))
		c.wake() // Run schedules the timeout
	case gaveUp:
		c.metrics.contestTimeouts.Inc()
		c.logger.Warn("Starting gained targets after --cluster.handoff-timeout although peers still follow another placement generation; a target may be scraped twice",
			"generation", fmt.Sprintf("%016x", gen), "peers", peerNames(lagging), "timeout", c.opts.HandoffTimeout)
	}
	if expired {
		return nil
	}
	return who
}

// peerNames are the peers' names, for logs.
func peerNames(peers []cluster.Peer) []string {
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = p.Name
	}
	return out
}

// contests reports whether one of who may scrape cand (at any of the rf
// ranks) under its own placement. A peer scrapes only targets it owns
// under the generation it last fenced: it fenced everything else, and
// starts nothing gained under a later one before it has announced that
// one's fence. Whom a target not placed by the ring (node-local, or
// scraped by every node) belongs to the placement cannot tell.
func contests(who []contender, cand gate.Candidate, rf int) bool {
	var buf []string
	for _, p := range who {
		if p.placement == nil || !cand.Placed {
			return true
		}
		buf = p.placement.Owners(cand.Key, rf, buf[:0])
		if slices.Contains(buf, p.name) {
			return true
		}
	}
	return false
}

// placementsKept is how many of the latest placements a node keeps to
// tell which targets a contending peer may own. A peer lags by a change or
// two; one whose generation is older, or that this node never built (it
// saw two changes as one), contends for every target, as before. Each is
// a ring (12 bytes per token: about 6 MiB at 1,000 members) and, with
// bounded loads, 12 bytes per target (12 MiB at a million): the three
// kept besides the current one cost at most three times that.
const placementsKept = 4

// builtPlacement is a placement this node built, with its generation.
type builtPlacement struct {
	gen uint64
	p   scrape.Placement
}

// rememberLocked keeps r among the latest placements built.
func (c *Coordinator) rememberLocked(r scrape.Placement) {
	gen := RingID(r)
	c.built = slices.DeleteFunc(c.built, func(b builtPlacement) bool { return b.gen == gen })
	if len(c.built) == placementsKept {
		c.built = slices.Delete(c.built, 0, 1)
	}
	c.built = append(c.built, builtPlacement{gen: gen, p: r})
}

// builtLocked is the placement of generation gen, if this node built it
// lately (nil otherwise).
func (c *Coordinator) builtLocked(gen uint64) scrape.Placement {
	for _, b := range c.built {
		if b.gen == gen {
			return b.p
		}
	}
	return nil
}

// placesBy is the scrape configuration (shortID) p places targets by: the
// one it keeps while the cluster does not agree on its new one, else the
// one it runs.
func placesBy(p cluster.Peer) uint64 {
	if p.ScrapeConfig.Prev != 0 {
		return p.ScrapeConfig.Prev
	}
	return p.ScrapeConfig.Cur
}

// pastFinalFence reports whether p, terminating, has made its final
// fence: it scrapes nothing more in this life and fences no later view.
func pastFinalFence(p cluster.Peer) bool {
	return p.State == cluster.Terminating && p.Handoff.Final
}

// fencedView reports whether p's last fence is of the view id. A peer of
// the previous version announces the plain RingID (it knows no
// configuration views, and hands off nothing on a reload): its fence of the
// ring counts, so that a rolling upgrade does not wait for every hand-off
// delay and hold.
func fencedView(p cluster.Peer, id, ringID uint64) bool {
	return p.Handoff.FencedRing == id || p.Handoff.FencedRing == ringID
}

// peersToWaitFor are the live peers that may be scraping: every live peer
// but this node. A viewer in this node's view may already be a participant
// in its own: two nodes promoted at the same moment each see the other as
// the viewer that joined, its first fence and promotion still in gossip.
// Each then waits for the other to fence its ring, so that neither starts
// the whole key space alone. The price: while a peer replays its WAL (a
// viewer that has announced nothing), gained targets wait the whole
// --cluster.handoff-delay.
func (c *Coordinator) peersToWaitFor() []cluster.Peer {
	var out []cluster.Peer
	for _, p := range c.cl.Peers() {
		if p.Self || p.Name == c.opts.NodeName {
			continue
		}
		out = append(out, p)
	}
	return out
}

// Activate implements scrape.Handoff: the units, gained under r and config,
// may append again, and the queues hold everything written from now on until
// the peers' samples from before their fences of that view are acknowledged.
func (c *Coordinator) Activate(r scrape.Placement, config uint64, units []scrape.Unit) {
	// The hold's position is read, and the hold saved, before the units
	// may append: a sample committed in between would otherwise be sent
	// ahead of the hold, now or after a restart.
	pos, err := c.wal.EndPosition()
	if err != nil {
		c.fence.Unfence(units)
		c.logger.Warn("Cannot read the WAL end position; gained targets start without a hold", "err", err)
		return
	}
	now := c.now()
	// The ring the units were gained under, not this node's last fence: the
	// filter activates before it fences, so that may still be the old ring,
	// and peers that already fenced r would be waited for until their next
	// fence, which comes only with the next ring change.
	var viewID, ringID uint64
	if r != nil {
		viewID, ringID = ViewID(r, config), RingID(r)
	}
	need := map[string]peerNeed{}
	alive := map[string]bool{c.opts.NodeName: true}
	for _, p := range c.peersToWaitFor() {
		alive[p.Name] = true
		wm := p.Handoff
		if wm.FencedSeq == 0 && !wm.Continued {
			// A peer of a version without watermarks, or one that has not
			// fenced anything yet (so owns nothing): nothing to wait for.
			continue
		}
		// A peer restarted on its storage may still send its previous
		// life's samples: they lie before its first fence of this life.
		first := wm.Continued && wm.FencedRing == 0
		// A peer that has not fenced this view (the units started on the
		// hand-off delay: a reload it has not applied yet) fences the
		// units it still scrapes with its next fence. Waiting for that
		// one is waiting forward in time, so only for the hand-off delay:
		// two nodes each holding for the other's next fence would
		// otherwise wait for each other until the hand-off timeout. A
		// peer that makes it later overlapped with this node anyway.
		// A peer past its final fence makes no later one: what it stopped
		// is all before that fence (LostSeq).
		next := first || !pastFinalFence(p) && !fencedView(p, viewID, ringID)
		if !next && wm.AckedSeq >= wm.LostSeq {
			// Whatever it stopped scraping, its samples are delivered.
			continue
		}
		need[p.Name] = peerNeed{seq: wm.LostSeq, fenced: wm.FencedSeq, next: next, first: first, start: p.StartTime}
	}
	c.needGone(need, alive)
	h := &hold{pos: pos, start: now, due: now.Add(c.opts.HandoffTimeout), nextUntil: now.Add(c.opts.HandoffDelay), release: c.remote.Hold(pos), need: need, backlogs: c.opts.Backlogs}
	c.mu.Lock()
	c.holds = append(c.holds, h)
	n := len(c.holds)
	c.mu.Unlock()
	c.saveState()
	c.fence.Unfence(units)
	c.metrics.holds.Set(float64(n))
	c.logger.Debug("Holding the remote-write queues until the peers' last samples of gained targets are acknowledged",
		"units", len(units), "position", pos, "waiting_for", needSummary(need))
	c.wake()
}

// needSummary describes what a hold waits for, for a debug log.
func needSummary(need map[string]peerNeed) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(need)) {
		n := need[name]
		parts = append(parts, fmt.Sprintf("%s:seq=%d,fenced=%d,next=%v", name, n.seq, n.fenced, n.next))
	}
	return strings.Join(parts, " ")
}

// step publishes acknowledged fences and releases holds that may go.
func (c *Coordinator) step() {
	if c.PublishAcked() == 0 {
		return
	}
	peers := c.alivePeers()
	now := c.now()
	ready := c.cl.Ready()
	c.mu.Lock()
	keep, done, expired := judgeHolds(c.holds, peers, now, ready)
	c.holds = keep
	long := longHolds(keep, now)
	c.mu.Unlock()
	c.endHolds(long, done, expired, peers, now)
	if len(done)+len(expired) > 0 {
		c.metrics.holds.Set(float64(len(keep)))
		c.saveState()
	}
}

// alivePeers maps the members by name.
func (c *Coordinator) alivePeers() map[string]cluster.Peer {
	peers := map[string]cluster.Peer{}
	for _, p := range c.cl.Peers() {
		peers[p.Name] = p
	}
	return peers
}

// judgeHolds sorts holds into those that stay, those whose peers are all
// satisfied and those past their timeout. A restored hold is judged only
// once the cluster is ready (ready): before, its peers count as gone.
func judgeHolds(holds []*hold, peers map[string]cluster.Peer, now time.Time, ready bool) (keep, done, expired []*hold) {
	for _, h := range holds {
		switch {
		case (ready || !h.restored) && h.satisfied(peers, now):
			done = append(done, h)
		case !now.Before(h.due):
			expired = append(expired, h)
		default:
			keep = append(keep, h)
		}
	}
	return keep, done, expired
}

// longHolds marks and returns the holds of keep that have lasted
// holdWarnAfter and were not logged yet.
func longHolds(keep []*hold, now time.Time) (long []*hold) {
	for _, h := range keep {
		if !h.warned && now.Sub(h.start) >= holdWarnAfter {
			h.warned = true
			long = append(long, h)
		}
	}
	return long
}

// endHolds logs the long holds and releases the done and expired ones,
// with their metrics.
func (c *Coordinator) endHolds(long, done, expired []*hold, peers map[string]cluster.Peer, now time.Time) {
	for _, h := range long {
		c.logger.Warn("A remote-write hold has lasted long: nothing this node wrote since is sent until the peers it waits for acknowledge their last samples of moved targets, leave, or --cluster.handoff-timeout passes",
			"held", now.Sub(h.start).Round(time.Second), "waiting_for", h.waitingFor(peers, now), "peers", holdPeers(h, peers), "timeout", c.opts.HandoffTimeout)
	}
	for _, h := range done {
		h.release()
		c.metrics.holdSeconds.Observe(now.Sub(h.start).Seconds())
		if c.logger.Enabled(context.Background(), slog.LevelDebug) {
			// holdPeers asks the hand-over tracker about every gone peer.
			c.logger.Debug("Released a remote-write hold: every peer's last samples are acknowledged or the peer is gone", "held", now.Sub(h.start), "peers", holdPeers(h, peers))
		}
	}
	for _, h := range expired {
		h.release()
		c.metrics.holdSeconds.Observe(now.Sub(h.start).Seconds())
		c.metrics.holdTimeouts.Inc()
		c.logger.Warn("Released the remote-write hold after --cluster.handoff-timeout although a peer's last samples of moved targets are not acknowledged; the receiver may refuse them as out of order",
			"timeout", c.opts.HandoffTimeout, "peers", h.waitingFor(peers, now))
	}
}

// PublishAcked publishes, at once, the acknowledgement of every fence whose
// samples the queues have acknowledged, and returns how many holds are in
// force. Run does so every ackPoll; a node leaving calls it after the
// remote-write flush and before the leave, so that its final state carries
// what the flush delivered (Run may have stopped, or not polled since):
// otherwise the new owners wait for a backlog hand-over that never comes.
func (c *Coordinator) PublishAcked() (holds int) {
	c.mu.Lock()
	moved := false
	if n := ackedMarks(c.pending, c.remote); n > 0 {
		c.ackedSeq = c.pending[n-1].seq
		c.pending = c.pending[n:]
		moved = true
	}
	wm := c.watermarksLocked()
	if moved {
		close(c.ackedCh)
		c.ackedCh = make(chan struct{})
	}
	holds = len(c.holds)
	c.mu.Unlock()
	// Every call publishes, not only the one that moved the acknowledgement:
	// a node leaving calls this while Run's last call may not have
	// published yet, and its final state must carry it.
	c.publishWatermarks()
	if moved {
		c.metrics.ackedSeq.Set(float64(wm.AckedSeq))
		c.saveState()
	}
	return holds
}

// nextWake is how long Run may sleep before polling acknowledgements or a
// hold's or a contested wait's timeout is due (0: nothing pending).
func (c *Coordinator) nextWake() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var d time.Duration
	if len(c.pending) > 0 || len(c.holds) > 0 {
		// Acknowledgements are polled; peers' watermarks arrive as changes.
		d = ackPoll
	}
	d = sooner(d, c.configWakeLocked(c.now()))
	if at := c.inputsDueAtLocked(); !at.IsZero() {
		d = sooner(d, max(at.Sub(c.now()), time.Millisecond))
	}
	if c.contestGen != 0 && !c.contestExpired {
		// The wake-up signals Changes: the filter asks the gate again,
		// which asks Contested.
		d = sooner(d, c.contestSince.Add(c.opts.HandoffTimeout).Sub(c.now()))
	}
	return d
}

// sooner is the earlier of two wake-ups, where 0 (or less) is none.
func sooner(d, t time.Duration) time.Duration {
	if t > 0 && (d <= 0 || t < d) {
		return t
	}
	return d
}

// satisfied reports whether every peer h waits for has acknowledged the
// fence h needs from it or is gone; see waitingFor.
func (h *hold) satisfied(alive map[string]cluster.Peer, now time.Time) bool {
	return len(h.waitingFor(alive, now)) == 0
}

// waitingFor lists, sorted, the alive peers whose samples h still waits for.
// A peer that restarted since the hold was placed sends its old life's
// backlog first (its queue reads its WAL in order), so the first fence it
// acknowledges in its new life covers what h waited for; one that carried
// its numbering over (Watermarks.Continued) is waited for by number.
func (h *hold) waitingFor(alive map[string]cluster.Peer, now time.Time) []string {
	var out []string
	for name, n := range h.need {
		p, ok := alive[name]
		seq := n.seq
		if n.next && (n.first || now.Before(h.nextUntil)) && !stoppedNothingSince(p, ok, n) {
			seq = n.fenced + 1 // seq ≤ fenced: LostSeq is one of the fences
		}
		if h.backlogs != nil && h.backlogs.Pending(name, n.start, seq, !ok) {
			// Handed over to another node: its delivery is the peer's.
			out = append(out, name)
			continue
		}
		if seq == 0 {
			continue // it stopped nothing in the life the hold saw
		}
		switch {
		case !ok:
			continue
		case !p.StartTime.Equal(n.start):
			// Restarted. With its numbering carried over, its fences
			// compare by number; otherwise its first acknowledged fence
			// comes after everything of the life before.
			if p.Handoff.Continued && p.Handoff.AckedSeq >= seq || !p.Handoff.Continued && p.Handoff.AckedSeq >= 1 {
				continue
			}
		case p.Handoff.AckedSeq >= seq:
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// needGone adds to need the departed nodes (absent from alive) whose
// backlog may still be pending with a carrier: a gained target can start
// after its old owner has left (the gate waited on a peer that follows
// another placement), and the old owner's last samples of it may then be
// in a backlog handed over to another node. Without this, the hold waited
// only for the peers alive when it was placed, and the backlog, delivered
// after this node's samples, was refused as out of order. Pending decides
// for each (waitingFor), so a backlog delivered meanwhile costs nothing.
func (c *Coordinator) needGone(need map[string]peerNeed, alive map[string]bool) {
	if c.opts.Backlogs == nil {
		return
	}
	for _, d := range c.opts.Backlogs.Lives() {
		if _, ok := need[d.Node]; ok || alive[d.Node] {
			continue
		}
		need[d.Node] = d.need()
	}
}

// stoppedNothingSince reports whether p (ok: alive) has, in the life n
// saw, fenced since n's fence and announces that none of those fences
// stopped a target: the next fence n waits for handed nothing over.
func stoppedNothingSince(p cluster.Peer, ok bool, n peerNeed) bool {
	return ok && p.StartTime.Equal(n.start) && p.Handoff.FencedSeq > n.fenced && p.Handoff.LostSeq <= n.fenced
}

// setsSummary describes published sets for a debug log: name, version and
// size of each.
func setsSummary(sets map[string]cluster.NodeWeights) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(sets)) {
		parts = append(parts, fmt.Sprintf("%s@%d:%d", n, sets[n].Version, len(sets[n].Weights)))
	}
	return strings.Join(parts, " ")
}

// holdPeers describes, for a log, how each peer h waits for stands: gone
// (its backlog still pending with another node, or not), restarted, or its
// acknowledged fence.
func holdPeers(h *hold, alive map[string]cluster.Peer) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(h.need)) {
		p, ok := alive[name]
		switch {
		case !ok && h.backlogs != nil && h.backlogs.Pending(name, h.need[name].start, h.need[name].seq, true):
			parts = append(parts, name+":gone,backlog-pending")
		case !ok:
			parts = append(parts, name+":gone")
		case !p.StartTime.Equal(h.need[name].start):
			parts = append(parts, fmt.Sprintf("%s:restarted,acked=%d", name, p.Handoff.AckedSeq))
		default:
			parts = append(parts, fmt.Sprintf("%s:acked=%d/%d", name, p.Handoff.AckedSeq, h.need[name].seq))
		}
	}
	return strings.Join(parts, " ")
}
