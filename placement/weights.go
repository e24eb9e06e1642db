package placement

import (
	"cmp"
	"encoding/binary"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
	"github.com/shoal-dev/shoal/scrape"
)

// Placement modes (Options.Placement).
const (
	// ModeRing places targets on the plain consistent-hash ring: equal
	// shares of the key space.
	ModeRing = "ring"
	// ModeBounded places the targets whose owners published a weight with
	// bounded loads (ring.NewBounded): no node above ring.DefaultLoadBound
	// times the mean samples/s.
	ModeBounded = "bounded"
)

// DefaultMode is --cluster.placement's default, the one place it is
// written. It stays the plain ring: bounded loads keep every delivery
// guarantee at 50 replicas, but agree on a placement after a join more
// slowly, which doubled a rolling restart's longest gap (docs/DESIGN.md,
// Placement, "Default, and why it is still ring"; docs/SCALE.md, "Bounded
// loads at 50 replicas").
const DefaultMode = ModeRing

// Modes lists the placement modes, the default first.
var Modes = []string{ModeRing, ModeBounded}

// DefaultWeightPeriod is how often a node publishes the weights of the
// targets it owns: each publication can move targets, so it is rare; the
// WeightPolicy's hysteresis keeps ordinary noise from changing any weight.
const DefaultWeightPeriod = 10 * time.Second

// bounded is a load-aware placement with its generation: every node that
// places the same participants and the same published weights computes the
// same owners and the same id.
type bounded struct {
	*ring.Bounded
	id     uint64
	sticky bool // placed by ring.NewSticky
}

// Capabilities are what a node of this version running placement mode
// tells its peers (cluster.Config.Capabilities).
func Capabilities(mode string) uint64 {
	if mode == ModeBounded {
		return capSticky | capBounded
	}
	return capSticky
}

const (
	// capSticky says the node places bounded loads starting from the
	// current owners (ring.NewSticky). A cluster places that way only when
	// every participant says so: a node of an older version places from
	// scratch (ring.NewBounded), and two placements would disagree on
	// owners.
	capSticky uint64 = 1 << 0
	// capBounded says the node runs ModeBounded. A cluster places with
	// bounded loads only when every participant does; otherwise every node
	// places on the ring, so that a rollout that changes the mode (or the
	// default) never has two placements at once.
	capBounded uint64 = 1 << 1
)

// placesSticky reports whether every participant in peers places with
// ring.NewSticky.
func placesSticky(peers []cluster.Peer) bool {
	for _, p := range peers {
		if p.State == cluster.Participant && p.Capabilities&capSticky == 0 {
			return false
		}
	}
	return true
}

// RingID implements the generation of a placement for RingID.
func (b *bounded) generation() uint64 { return b.id }

// estimate is this node's measurement of one target it scrapes as primary.
type estimate struct {
	ring.Estimate
	last     time.Time     // last measurement, or when the target was adopted
	interval time.Duration // scrape interval at the last measurement
}

// departedSet is a weight set whose publisher went away (died, left, or
// restarted as a new incarnation), kept for the grace period.
type departedSet struct {
	weights map[uint64]float64
	until   time.Time
}

// weigher measures the targets this node scrapes, decides what it
// publishes, and merges what every node published into the set that is
// placed. Its methods are safe for concurrent use; Measured is called from
// scrape commits.
type weigher struct {
	policy ring.WeightPolicy
	period time.Duration // publication period
	grace  time.Duration // how long a departed publisher's weights stay
	now    func() time.Time

	mu       sync.Mutex
	est      map[uint64]*estimate
	mine     map[uint64]float64   // what this node publishes
	lostAt   map[uint64]time.Time // keys in mine this node is no longer primary of
	seen     map[string]cluster.NodeWeights
	departed map[string]departedSet // by name + "\xff" + incarnation
	placed   map[uint64]float64     // the union last placed
	last     unionResult            // union's last answer
}

// unionResult is an answer of union, valid while the sets it came from
// (setsDigest) are the same and no departed set in it has expired: every
// membership event asks, and most change neither.
type unionResult struct {
	ok           bool
	sets         uint64
	expires      time.Time // the first departed set's end (zero: none)
	u            map[uint64]float64
	digest       uint64
	departedOnly []uint64
}

func newWeigher(p ring.WeightPolicy, period time.Duration, now func() time.Time) *weigher {
	return &weigher{
		policy:   p,
		period:   period,
		grace:    2 * period,
		now:      now,
		est:      map[uint64]*estimate{},
		mine:     map[uint64]float64{},
		lostAt:   map[uint64]time.Time{},
		seen:     map[string]cluster.NodeWeights{},
		departed: map[string]departedSet{},
	}
}

// measured folds one scrape of a target into its estimate: samples per
// second = samples appended / scrape interval. Only the primary rank is
// measured (one weight per target, whatever the replication factor).
func (w *weigher) measured(u scrape.Unit, samples int, interval time.Duration) {
	if u.Rank != 0 || interval <= 0 || samples <= 0 {
		return
	}
	v := float64(samples) / interval.Seconds()
	now := w.now()
	w.mu.Lock()
	e := w.est[u.Key]
	if e == nil {
		e = &estimate{}
		w.est[u.Key] = e
	}
	e.Estimate = w.policy.Smooth(e.Estimate, v)
	e.last, e.interval = now, interval
	w.mu.Unlock()
}

// stale is how long an estimate lives without a measurement: the target
// is no longer scraped here (gone from discovery, or moved away).
func (w *weigher) stale(e *estimate) time.Duration {
	if e.Samples == 0 {
		// Adopted, not scraped here yet: its interval is unknown and may be
		// long, and dropping it would move it to its plain-ring owner and back.
		return max(2*w.period, adoptedStale)
	}
	return max(2*w.period, 3*e.interval)
}

// adoptedStale is how long a target this node became primary of stays
// published without being measured here.
const adoptedStale = 10 * time.Minute

// union merges the published sets (sets: every alive node's latest, this
// node's included) with the departed ones still in their grace period. A
// key published twice (an old owner that has not dropped it yet) keeps its
// largest weight, as ring.NewBounded does, so the order of arrival never
// matters. It returns the union, its digest, and the keys only departed
// sets publish (no alive owner). sd is setsDigest(sets).
func (w *weigher) union(sets map[string]cluster.NodeWeights, sd uint64) (u map[uint64]float64, d uint64, departedOnly []uint64) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if l := w.last; l.ok && l.sets == sd && (l.expires.IsZero() || now.Before(l.expires)) {
		return l.u, l.digest, l.departedOnly // the callers only read u
	}
	u, d, departedOnly = w.unionLocked(sets, now)
	w.last = unionResult{ok: true, sets: sd, u: u, digest: d, departedOnly: departedOnly}
	for _, dep := range w.departed {
		if w.last.expires.IsZero() || dep.until.Before(w.last.expires) {
			w.last.expires = dep.until
		}
	}
	return u, d, departedOnly
}

func (w *weigher) unionLocked(sets map[string]cluster.NodeWeights, now time.Time) (u map[uint64]float64, d uint64, departedOnly []uint64) {
	for name, old := range w.seen {
		if cur, ok := sets[name]; ok && cur.Incarnation == old.Incarnation {
			continue
		}
		w.departed[departedKey(name, old.Incarnation)] = departedSet{weights: old.Weights, until: now.Add(w.grace)}
	}
	w.seen = maps.Clone(sets)
	u = map[uint64]float64{}
	add := func(ws map[uint64]float64) {
		for k, v := range ws {
			if v > u[k] {
				u[k] = v
			}
		}
	}
	for _, s := range sets {
		add(s.Weights)
	}
	// A departed set counts only while some of its targets have no alive
	// publisher yet: the new owners adopt at once, and a node that never
	// saw the set (it joined or restarted since) places the same union as
	// soon as they have. Keeping a covered set for the whole grace would
	// make such nodes place different generations for that long, and a
	// gained target would wait the whole hand-off delay.
	for k, d := range w.departed {
		covered := true
		for key := range d.weights {
			if _, ok := u[key]; !ok {
				covered = false
				break
			}
		}
		if covered || !now.Before(d.until) {
			delete(w.departed, k)
		}
	}
	for _, d := range w.departed {
		for k := range d.weights {
			if _, ok := u[k]; !ok {
				departedOnly = append(departedOnly, k)
			}
		}
		add(d.weights)
	}
	return u, digest(u), departedOnly
}

func departedKey(name string, inc int64) string {
	return name + "\xff" + string(binary.LittleEndian.AppendUint64(nil, uint64(inc)))
}

// digest identifies a weight set, independent of map order.
func digest(u map[uint64]float64) uint64 {
	keys := slices.Sorted(maps.Keys(u))
	var d xxhash.Digest
	d.Reset()
	var b [16]byte
	for _, k := range keys {
		binary.LittleEndian.PutUint64(b[:8], k)
		binary.LittleEndian.PutUint64(b[8:], math.Float64bits(u[k]))
		_, _ = d.Write(b[:])
	}
	return d.Sum64()
}

// ownedLoads turns a union into NewSticky's input: each key once per alive
// node in sets that publishes it, with that node as its owner, and the keys
// only departed sets publish once, without one. Every entry has the
// union's weight.
func ownedLoads(u map[uint64]float64, sets map[string]cluster.NodeWeights, departedOnly []uint64) []ring.Owned {
	n := len(departedOnly)
	for _, s := range sets {
		n += len(s.Weights)
	}
	out := make([]ring.Owned, 0, n)
	for name, s := range sets {
		for k := range s.Weights {
			out = append(out, ring.Owned{Load: ring.Load{Key: k, Weight: u[k]}, Owner: name})
		}
	}
	for _, k := range departedOnly {
		out = append(out, ring.Owned{Load: ring.Load{Key: k, Weight: u[k]}})
	}
	return out
}

// setsDigest identifies who publishes what: each alive publisher's name,
// incarnation and version. A sticky placement reads the publishers, so a
// change of one of them is a new input even when the union is not.
func setsDigest(sets map[string]cluster.NodeWeights) uint64 {
	var d xxhash.Digest
	d.Reset()
	var b [16]byte
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		s := sets[name]
		_, _ = d.WriteString(name)
		binary.LittleEndian.PutUint64(b[:8], uint64(s.Incarnation))
		binary.LittleEndian.PutUint64(b[8:], s.Version)
		_, _ = d.Write(b[:])
	}
	return d.Sum64()
}

// loads turns a union into NewBounded's input, sorted by key.
func loads(u map[uint64]float64) []ring.Load {
	out := make([]ring.Load, 0, len(u))
	for k, v := range u {
		out = append(out, ring.Load{Key: k, Weight: v})
	}
	slices.SortFunc(out, func(a, b ring.Load) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// publish returns the weights this node should publish under placement p
// (where self is primary) given the union u that p was built from. With
// full it applies the WeightPolicy to its estimates (once per period);
// otherwise it only adopts the weights of targets it has just become
// primary of and drops those it lost, so that a moved target stays in the
// placed set with the same weight while ownership changes hands.
//
//   - A target this node is primary of: the policy's weight (full), else
//     the weight already in u (adoption: a young estimate never changes a
//     weight), else nothing until it has MinSamples measurements. One that
//     has not been measured for a while (stale) is dropped: it is gone.
//   - A target it lost: kept until its primary owner under p publishes it,
//     or for two periods, so that a hand-off does not drop it from the
//     placed set. (Not "until any other node publishes it": two old owners
//     of one target would each see the other and both drop it.)
func (w *weigher) publish(p scrape.Placement, self string, u map[uint64]float64, others map[uint64][]string, full bool) map[uint64]float64 {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	var buf [1]string
	primary := func(k uint64) bool {
		o := p.Owners(k, 1, buf[:0])
		return len(o) == 1 && o[0] == self
	}
	next := make(map[uint64]float64, len(w.mine))
	// Adopt what this node is now primary of: the target stays placed with
	// the weight it had while this node's own estimate grows.
	for k, v := range u {
		if !primary(k) {
			continue
		}
		e := w.est[k]
		if e == nil {
			e = &estimate{last: now}
			w.est[k] = e
		}
		next[k] = v
	}
	for k, e := range w.est {
		if now.Sub(e.last) > w.stale(e) {
			delete(w.est, k)
			delete(next, k)
			continue
		}
		if !primary(k) {
			if _, published := u[k]; published {
				// Another node is primary now; this estimate would only
				// restart from zero when the target comes back.
				delete(w.est, k)
			}
			continue
		}
		if full {
			if v := w.policy.Publish(u[k], e.Estimate); v > 0 {
				next[k] = float64(float32(v)) // as it travels (cluster.SetWeights)
			}
		}
	}
	// Lost targets stay published until their new owner publishes them.
	for k, v := range w.mine {
		if _, ok := next[k]; ok {
			delete(w.lostAt, k)
			continue
		}
		if primary(k) {
			continue // dropped above: stale
		}
		at, ok := w.lostAt[k]
		if !ok {
			at = now
			w.lostAt[k] = at
		}
		if o := p.Owners(k, 1, buf[:0]); len(o) == 1 && slices.Contains(others[k], o[0]) || now.Sub(at) >= 2*w.period {
			delete(w.lostAt, k)
			continue
		}
		next[k] = v
	}
	w.mine = next
	return maps.Clone(next)
}

// publishedByOthers lists, per key, the other alive nodes that publish it.
func publishedByOthers(sets map[string]cluster.NodeWeights, self string) map[uint64][]string {
	out := map[uint64][]string{}
	for name, s := range sets {
		if name == self {
			continue
		}
		for k := range s.Weights {
			out[k] = append(out[k], name)
		}
	}
	return out
}

// selfRate is this node's measured samples/s: the sum of its estimates.
func (w *weigher) selfRate() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var s float64
	for _, e := range w.est {
		if e.Samples > 0 {
			s += e.Value
		}
	}
	return s
}

// boundedAgreed reports whether the cluster places with bounded loads:
// this node runs ModeBounded (it has a weigher) and so does every
// participant, by its capabilities or, for a node of an older version,
// which announces none, by its published weights (such a node publishes a
// set, empty at first, only in ModeBounded). Otherwise every node of this
// version places on the ring. A change is logged.
func (c *Coordinator) boundedAgreed(peers []cluster.Peer, sets map[string]cluster.NodeWeights) bool {
	var ring []string
	for _, p := range peers {
		_, publishes := sets[p.Name]
		switch {
		case p.State != cluster.Participant:
		case p.Capabilities&capBounded != 0:
		case p.Capabilities == 0 && publishes:
		default:
			ring = append(ring, p.Name)
		}
	}
	c.mu.Lock()
	changed := !slices.Equal(ring, c.ringPeers) || !c.modeLogged
	c.ringPeers, c.modeLogged = ring, true
	c.mu.Unlock()
	switch {
	case !changed:
	case len(ring) == 0:
		c.logger.Info("Placing targets with bounded loads: every participant runs --cluster.placement=bounded")
	default:
		c.logger.Warn("Placing targets on the plain ring although this node runs --cluster.placement=bounded: these participants run ring (or a version that cannot say); the cluster places with bounded loads once every participant does",
			"participants", ring)
	}
	c.metrics.ringFallback.Set(b2f(len(ring) > 0))
	return len(ring) == 0
}
