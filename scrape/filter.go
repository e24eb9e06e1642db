package scrape

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"

	"github.com/shoal-dev/shoal/placement/gate"
)

// DefaultRingCoalesce is FilterOptions.RingCoalesce's default.
const DefaultRingCoalesce = 100 * time.Millisecond

// Drop reasons reported in TargetInfo.DropReason. A target that is not owned
// because another node owns it reports "owned by <node>[, <node>...]"; an
// invalid target (no address, bad interval label, ...) reports
// "invalid target: <error>".
const (
	ReasonRelabelled     = "relabelled away"
	ReasonNotParticipant = "not a participant"
	ReasonWaitingHandoff = "waiting for hand-off"
	ReasonNoOwner        = "no participant owns it"
	reasonOwnedByPrefix  = "owned by "
	reasonInvalidPrefix  = "invalid target: "
)

// ReasonNotPlaced: the target's job is new, or the target is relabelled
// away, in the scrape configuration the cluster still places targets by
// (View.PlaceBy); it is scraped once the cluster places by
// this node's configuration.
const ReasonNotPlaced = "not in the configuration the cluster places by yet"

// FilterOptions configures a Filter. The zero value is usable: every zero
// field takes the documented default.
type FilterOptions struct {
	// Handoff, when set, orders hand-offs: lost targets are fenced before
	// anything else happens, and gained ones start when Handoff.Admit says
	// so. Every target passed on then carries UnitLabel. Without it
	// (clustering disabled) nothing is ever held back.
	Handoff Handoff

	// ReplicaLabel, with a replication factor above 1, is the target label
	// that gets this node's rank for the target ("0" for the primary, ...),
	// so that every rank is one continuous series. Empty: no label.
	ReplicaLabel string

	// RingCoalesce is how long the Filter waits after a SetRing call before
	// re-filtering, so that a burst of membership changes (a rollout, several
	// peers joining) costs one re-filter and one scrape-manager reload. The
	// window starts at the first call of a burst and is not extended by later
	// ones. 0 means DefaultRingCoalesce (100ms); a negative value re-filters
	// at once.
	RingCoalesce time.Duration
}

func (o FilterOptions) withDefaults() FilterOptions {
	switch {
	case o.RingCoalesce == 0:
		o.RingCoalesce = DefaultRingCoalesce
	case o.RingCoalesce < 0:
		o.RingCoalesce = 0
	}
	return o
}

// ScrapeManager is the part of *promscrape.Manager the Filter uses for
// hand-off. It may be nil, in which case moved targets keep their staleness
// markers.
type ScrapeManager interface {
	DisableEndOfRunStalenessMarkers(job string, targets []*promscrape.Target)
	TargetsActive() map[string][]*promscrape.Target
}

// Placement tells the owners of a target key: *ring.Ring (plain consistent
// hashing) or the placement package's load-aware placement. Two values that
// compare equal must place every key alike.
type Placement interface {
	// Owners appends to buf[:0] the first n owners of key, primary first.
	Owners(key uint64, n int, buf []string) []string
	// Len is the number of nodes placed on.
	Len() int
	// Nodes are the nodes placed on, sorted.
	Nodes() []string
}

// isNil reports whether p is nil or a nil pointer in an interface (a nil
// *ring.Ring means clustering is disabled, as a nil Placement does).
func isNil(p Placement) bool {
	if p == nil {
		return true
	}
	v := reflect.ValueOf(p)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Handoff is what the Filter needs to hand targets over in order. The
// placement package implements it: it owns every decision of the hand-off
// (when a gained target starts, the fences, the holds, the configuration
// the cluster places by); the Filter computes the candidates, applies the
// answers and reports what it did. Every change of the Placement (a
// membership change, or with load-aware placement a weight change) is a new
// generation that is fenced and released as a whole.
type Handoff interface {
	// Changes is signalled when View or Admit's answers may have changed;
	// the Filter then reads View and re-filters (a new view after
	// FilterOptions.RingCoalesce; the same one only if targets wait). It
	// is the one way the Handoff reaches the Filter: a notification that
	// carries no decision, so the Handoff never holds the Filter.
	Changes() <-chan struct{}
	// View returns the placement to filter by and its generation, which
	// changes with every new view; generation 0 is no view yet.
	View() (View, uint64)
	// Admit decides which of the gained candidates (keys this node owns
	// under r and the scrape configuration config, ConfigID, and does not
	// scrape at that rank yet) start now; the others wait. None starts
	// before Fenced of the same view: the units lost in the change are
	// fenced before any gained one is activated. The Filter asks
	// again at the answer's Next, and when Changes is signalled: the
	// Handoff must signal it when its answer may change. Each call replaces the
	// set of waiting candidates.
	Admit(now time.Time, r Placement, config uint64, cands []gate.Candidate) gate.Admission
	// Fence makes sure this node appends nothing more of units; it returns
	// once appends already under way are done.
	Fence(ctx context.Context, units []Unit) error
	// Fenced is called after every re-filter: every unit this node does not
	// own under r and config (with participant as given) is fenced now.
	Fenced(r Placement, config uint64, participant bool)
	// Activate is called with the units about to be passed on to the scrape
	// manager for the first time (admitted, or gained back) under r and
	// config: they must be un-fenced, and their first samples ordered after
	// the previous owners'. It is called before Fenced of the same re-filter.
	Activate(r Placement, config uint64, units []Unit)
	// Configured tells which scrape configuration this node has loaded
	// (cur, a ConfigID) and which one it keeps to place targets by until
	// the cluster agrees on cur (prev; 0 when none). It is called when
	// either changes.
	Configured(cur, prev uint64)
}

// View is what a Handoff tells the Filter to place targets by.
type View struct {
	// Placement, Self, ReplicationFactor and Participant are SetRing's
	// arguments.
	Placement         Placement
	Self              string
	ReplicationFactor int
	Participant       bool
	// KubeNodes are the participants' Kubernetes node names, for
	// node-local targets (see setKubeNodes).
	KubeNodes map[string]string
	// PlaceBy is the ConfigID of the scrape configuration the cluster
	// places targets by (see setPlacementConfig).
	PlaceBy uint64
}

// TargetInfo describes one discovered target and its ownership, for the
// status page and the targets APIs.
type TargetInfo struct {
	Job       string
	ScrapeURL string // empty when the target was relabelled away or is invalid
	Key       uint64 // 0 when ScrapeURL is empty
	// Labels are the final target labels after relabelling (empty when
	// dropped); DiscoveredLabels are the labels before relabelling.
	Labels           labels.Labels
	DiscoveredLabels labels.Labels
	// Owners are the nodes that own the key under the current ring, primary
	// first; just this node when clustering is disabled. The sharding mode
	// comes first: every participant (all), the one on the target's node
	// (node-local).
	Owners []string
	// Sharding is the target's ShardingLabel value ("" for ring).
	Sharding string
	// Owned reports whether this node scrapes the target now.
	Owned bool
	// DropReason says why this node does not scrape it: "" when Owned, else
	// one of the Reason* values, "owned by <nodes>" or "invalid target: <err>".
	DropReason string
}

// Filter passes on the discovered targets this node owns. Create it with
// NewFilter, then call ApplyConfig and SetRing (when clustering is enabled)
// before or while Run runs. All methods are safe for concurrent use.
type Filter struct {
	opts    FilterOptions
	mgr     ScrapeManager
	logger  *slog.Logger
	metrics *metrics

	ringSignal chan struct{} // SetRing was called; capacity 1 coalesces
	cfgSignal  chan struct{} // ApplyConfig was called
	work       *handoffWork  // hand-off steps of the last re-filters, for Run

	mu      sync.Mutex
	cfgs    map[string]*config.ScrapeConfig
	cfgID   uint64 // ConfigID of cfgs
	jobs    map[string]*jobState
	latest  ringState // as last given to SetRing
	applied ringState // as used by the last re-filter
	// owned are the keys passed on to the scrape manager; waiting are keys
	// gained and held back by the Handoff's gate at the last re-filter;
	// known are the keys of every valid discovered target at the last
	// re-filter. A waiting key maps to whether it was new when first seen
	// (not Known): starting later, it did not move in.
	owned   map[uint64]int // key -> rank
	waiting map[uint64]bool
	known   map[uint64]struct{}
	// series maps the series identity (seriesID) of every known target to
	// its key, and ownedSeries the owned keys to theirs: a key that goes
	// away while its series is still discovered under another key (a reload
	// or relabelling changed the URL) moved, and is handed off.
	series      map[uint64]uint64
	ownedSeries map[uint64]uint64
	// ownedURL is the scrape URL of every owned key: a reload that changes
	// it while the key stays (the cluster still places by the previous
	// configuration) keeps the owner and replaces only the scrape loop.
	ownedURL  map[uint64]string
	refilters int    // for tests: how many re-filters ran
	viewGen   uint64 // the generation of the Handoff's View last followed
	resend    bool   // the job set changed: send even if no target moved

	// prevCfgs are the scrape configs this node placed targets by when it
	// loaded cfgs, kept while the cluster places by them (prevID; 0: none).
	// keyedBy is the ConfigID the entries' keys were computed under.
	prevCfgs map[string]*config.ScrapeConfig
	prevID   uint64
	keyedBy  uint64
}

type ringState struct {
	ring        Placement
	self        string
	rf          int
	participant bool
	kube        *kubeNodes // for node-local targets; see sharding.go
	// placeBy is the ConfigID of the scrape configuration the cluster
	// places targets by (setPlacementConfig); 0: this node's own.
	placeBy uint64
}

// owners returns the ring owners of key under s, appended to buf[:0]
// (ownersOf applies the target's sharding mode first).
func (s ringState) owners(key uint64, buf []string) []string {
	if s.ring == nil {
		return append(buf[:0], s.self)
	}
	return s.ring.Owners(key, s.rf, buf)
}

// ownedByOther reports whether some node other than s.self owned e under
// s, i.e. whether someone may still be scraping it.
func (s ringState) ownedByOther(e entry, buf []string) bool {
	if s.ring == nil {
		return false
	}
	for _, o := range s.ownersOf(e, buf) {
		if o != s.self {
			return true
		}
	}
	return false
}

type jobState struct {
	// groups and entries always match each other; a discovery update waits
	// in next until the following re-filter, so Targets never sees groups
	// without their entries.
	groups  []*targetgroup.Group
	entries []entry
	next    []*targetgroup.Group
	hasNext bool
	dirty   bool // entries must be recomputed (new groups or config)
	// reported is whether an update with groups came; emptySince is when
	// the first update without any came before that (see Waiting).
	reported   bool
	emptySince time.Time
}

// entry is one discovered target, in group order.
type entry struct {
	group, index int
	key          uint64
	series       uint64 // seriesID of the final labels
	mode         shardMode
	node         string // KubeNodeLabel, for node-local targets
	url          string
	labels       labels.Labels // final labels; empty when dropped
	reason       string        // non-empty when the target has no key
}

// NewFilter returns a Filter that hands moved targets off through mgr
// (which may be nil) and registers its metrics on reg (which may be nil;
// Close unregisters them). Until SetRing is called the Filter behaves as if
// clustering were disabled and owns every target: call SetRing with
// participant=false first if the node must not scrape before it has joined.
func NewFilter(opts FilterOptions, mgr ScrapeManager, logger *slog.Logger, reg prometheus.Registerer) (*Filter, error) {
	if logger == nil {
		logger = promslog.NewNopLogger()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	f := &Filter{
		opts:        opts.withDefaults(),
		mgr:         mgr,
		logger:      logger,
		metrics:     m,
		ringSignal:  make(chan struct{}, 1),
		cfgSignal:   make(chan struct{}, 1),
		cfgs:        map[string]*config.ScrapeConfig{},
		jobs:        map[string]*jobState{},
		latest:      ringState{rf: 1, participant: true},
		owned:       map[uint64]int{},
		waiting:     map[uint64]bool{},
		known:       map[uint64]struct{}{},
		series:      map[uint64]uint64{},
		ownedSeries: map[uint64]uint64{},
		ownedURL:    map[uint64]string{},
	}
	f.applied = f.latest
	f.metrics.setRing(f.applied)
	return f, nil
}

// Close unregisters the Filter's metrics.
func (f *Filter) Close() { f.metrics.group.Unregister() }

// ApplyConfig takes the scrape configs by job name. Targets of jobs that are
// no longer configured are forgotten; jobs whose config changed get their
// keys recomputed. The scrape manager must be given the same config.
func (f *Filter) ApplyConfig(cfg *config.Config) error {
	if cfg == nil {
		return errors.New("scrape filter: nil config")
	}
	scfgs, err := cfg.GetScrapeConfigs()
	if err != nil {
		return fmt.Errorf("scrape filter: %w", err)
	}
	cfgs := make(map[string]*config.ScrapeConfig, len(scfgs))
	for _, sc := range scfgs {
		cfgs[sc.JobName] = sc
	}

	id := ConfigID(scfgs)
	f.mu.Lock()
	oldCur, oldPrev := f.cfgID, f.prevID
	f.keepPlacing(id)
	f.cfgID = id
	for job, js := range f.jobs {
		newCfg, ok := cfgs[job]
		if !ok {
			delete(f.jobs, job)
			f.metrics.forgetJob(job)
			continue
		}
		if old := f.cfgs[job]; old == nil || !reflect.DeepEqual(old, newCfg) {
			js.dirty = true
		}
	}
	f.cfgs = cfgs
	f.resend = true
	cur, prev := f.cfgID, f.prevID
	f.mu.Unlock()

	if h := f.opts.Handoff; h != nil && (cur != oldCur || prev != oldPrev) {
		h.Configured(cur, prev)
	}
	select {
	case f.cfgSignal <- struct{}{}:
	default:
	}
	return nil
}

// keepPlacing is ApplyConfig's step for a configuration id that differs
// from the loaded one: the configuration targets are placed by now stays at
// hand as prevCfgs, so that this node keeps placing targets where its peers
// do until the cluster agrees on the new one. Without hand-off (no peers)
// nothing is kept.
func (f *Filter) keepPlacing(id uint64) {
	if id == f.cfgID || f.cfgID == 0 || f.opts.Handoff == nil {
		return
	}
	placing := f.latest.placeBy
	if placing == 0 || placing != f.prevID {
		// Placing by the loaded configuration (or by none this node has:
		// it steps aside): that one is the best guess of the cluster's.
		f.prevCfgs, f.prevID = f.cfgs, f.cfgID
	}
	if f.prevID == id {
		// Back to the configuration placed by: nothing to keep.
		f.prevCfgs, f.prevID = nil, 0
	}
}

// setPlacementConfig tells the Filter the ConfigID of the scrape
// configuration the cluster places targets by: this node's loaded one, or
// the one it kept when it loaded that (see Handoff.Configured). Targets are
// then placed by their keys under it and scraped under the loaded one. An
// id the Filter does not hold places by the loaded configuration (the
// caller makes such a node own nothing). Like SetRing, calls are coalesced.
func (f *Filter) setPlacementConfig(id uint64) {
	f.mu.Lock()
	f.latest.placeBy = id
	f.mu.Unlock()
	select {
	case f.ringSignal <- struct{}{}:
	default:
	}
}

// placingLocked returns the scrape configs targets are placed by under s,
// and their ConfigID.
func (f *Filter) placingLocked(s ringState) (map[string]*config.ScrapeConfig, uint64) {
	if s.placeBy != 0 && s.placeBy == f.prevID && f.prevID != f.cfgID {
		return f.prevCfgs, f.prevID
	}
	return f.cfgs, f.cfgID
}

// SetRing sets the placement (a ring) and this node's place in it. When participant is
// false (a viewer that is not ready yet, or a node that is terminating) the
// node owns nothing at all. Otherwise a nil ring means clustering is disabled
// and the node owns every target, and a non-nil ring gives it the targets
// whose first replicationFactor owners include self. Calls are coalesced:
// Run re-filters once per FilterOptions.RingCoalesce with the latest values.
// A Filter with a Handoff follows the Handoff's View: SetRing only sets its
// state until the next view (before the first one, or on shutdown).
func (f *Filter) SetRing(r Placement, self string, replicationFactor int, participant bool) {
	f.mu.Lock()
	f.latest = newRingState(r, self, replicationFactor, participant, f.latest.kube, f.latest.placeBy)
	f.mu.Unlock()
	f.ringChanged()
}

func newRingState(r Placement, self string, rf int, participant bool, kube *kubeNodes, placeBy uint64) ringState {
	if isNil(r) {
		r = nil
	}
	return ringState{ring: r, self: self, rf: max(rf, 1), participant: participant, kube: kube, placeBy: placeBy}
}

// ringChanged makes Run re-filter after the coalescing window.
func (f *Filter) ringChanged() {
	select {
	case f.ringSignal <- struct{}{}:
	default:
	}
}

// follow reads the Handoff's view after it signalled a change: a new
// generation is set as SetRing, setKubeNodes and setPlacementConfig would;
// it reports whether there was one.
func (f *Filter) follow() bool {
	v, gen := f.opts.Handoff.View()
	f.mu.Lock()
	if gen == 0 || gen == f.viewGen {
		f.mu.Unlock()
		return false
	}
	f.viewGen = gen
	f.latest = newRingState(v.Placement, v.Self, v.ReplicationFactor, v.Participant, &kubeNodes{byPeer: v.KubeNodes}, v.PlaceBy)
	f.mu.Unlock()
	f.ringChanged()
	return true
}

// Run reads discovery updates from in and writes the owned targets to out
// until ctx is done or in is closed; it returns nil then. Each update maps job
// names to all of that job's target groups; jobs missing from an update keep
// their previous groups. Every output holds every configured job that has
// been discovered, with the same group Sources and Labels and only the owned
// targets, possibly none. Run never blocks discovery: while out is not being
// read, newer results replace the unsent one. Run does not close out.
func (f *Filter) Run(ctx context.Context, in <-chan map[string][]*targetgroup.Group, out chan<- map[string][]*targetgroup.Group) error {
	var (
		unsent     map[string][]*targetgroup.Group
		coalesce   *time.Timer
		coalesceC  <-chan time.Time
		handoff    *time.Timer
		handoffC   <-chan time.Time
		refiltered = func() {
			res, changed, next := f.refilter(time.Now())
			if changed {
				unsent = res
			}
			f.handoff(ctx, &unsent, out)
			if handoff != nil {
				handoff.Stop()
				handoff, handoffC = nil, nil
			}
			if !next.IsZero() {
				handoff = time.NewTimer(time.Until(next))
				handoffC = handoff.C
			}
		}
	)
	var changes <-chan struct{}
	if h := f.opts.Handoff; h != nil {
		changes = h.Changes()
		f.follow()
	}
	defer func() {
		if coalesce != nil {
			coalesce.Stop()
		}
		if handoff != nil {
			handoff.Stop()
		}
	}()

	for {
		var sendC chan<- map[string][]*targetgroup.Group
		if unsent != nil {
			sendC = out
		}
		select {
		case <-ctx.Done():
			return nil
		case update, ok := <-in:
			if !ok {
				return nil
			}
			f.merge(update)
			refiltered()
		case <-f.cfgSignal:
			refiltered()
		case <-changes:
			if !f.follow() {
				f.recheckWaiting(refiltered)
			}
		case <-f.ringSignal:
			if coalesceC == nil {
				coalesce = time.NewTimer(f.opts.RingCoalesce)
				coalesceC = coalesce.C
			}
		case <-coalesceC:
			coalesce, coalesceC = nil, nil
			refiltered()
		case <-handoffC:
			handoff, handoffC = nil, nil
			refiltered()
		case sendC <- unsent:
			unsent = nil
		}
	}
}

// recheckWaiting re-filters if targets wait for the Handoff: its answer
// may have changed.
func (f *Filter) recheckWaiting(refiltered func()) {
	f.mu.Lock()
	n := len(f.waiting)
	f.mu.Unlock()
	if n > 0 {
		refiltered()
	}
}

// merge stores the latest groups of every job in update.
func (f *Filter) merge(update map[string][]*targetgroup.Group) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for job, groups := range update {
		js := f.jobs[job]
		if js == nil {
			js = &jobState{}
			f.jobs[job] = js
		}
		js.next, js.hasNext = groups, true
		js.dirty = true
		switch {
		case len(groups) > 0:
			js.reported = true
		case !js.reported && js.emptySince.IsZero():
			js.emptySince = time.Now()
		}
	}
}

// computeEntries runs relabelling for every target of a job. Keys are
// computed under place, the job's config in the configuration targets are
// placed by (nil: the job is not in it), unless that is cfg itself.
func computeEntries(js *jobState, cfg, place *config.ScrapeConfig, lb *labels.Builder) (invalid int, firstErr error) {
	if js.hasNext {
		js.groups, js.next, js.hasNext = js.next, nil, false
	}
	n := 0
	for _, g := range js.groups {
		if g != nil {
			n += len(g.Targets)
		}
	}
	entries := make([]entry, 0, n)
	for gi, g := range js.groups {
		if g == nil {
			continue
		}
		for ti, tl := range g.Targets {
			e := entry{group: gi, index: ti}
			key, u, final, err := KeyFor(lb, cfg, tl, g.Labels)
			switch {
			case errors.Is(err, ErrDropped):
				e.reason = ReasonRelabelled
			case err != nil:
				e.reason = reasonInvalidPrefix + err.Error()
				invalid++
				if firstErr == nil {
					firstErr = fmt.Errorf("group %q target %d: %w", g.Source, ti, err)
				}
			default:
				mode, node, err := shardingOf(final, tl, g.Labels)
				if err != nil {
					e.reason = reasonInvalidPrefix + err.Error()
					invalid++
					if firstErr == nil {
						firstErr = fmt.Errorf("group %q target %d: %w", g.Source, ti, err)
					}
					break
				}
				e.key, e.url, e.labels = key, u, final
				e.series = seriesID(final)
				e.mode, e.node = mode, node
				if place != cfg {
					e.key, e.reason = placeKey(lb, place, tl, g.Labels)
				}
			}
			entries = append(entries, e)
		}
	}
	js.entries = entries
	js.dirty = false
	return invalid, firstErr
}

// placeKey is a target's key under place, the config of its job that
// targets are placed by; a target that config does not know (no such job,
// relabelled away, invalid) has no key and ReasonNotPlaced.
func placeKey(lb *labels.Builder, place *config.ScrapeConfig, tl, gl model.LabelSet) (uint64, string) {
	if place == nil {
		return 0, ReasonNotPlaced
	}
	key, _, _, err := KeyFor(lb, place, tl, gl)
	if err != nil {
		return 0, ReasonNotPlaced
	}
	return key, ""
}

// dropPrevLocked forgets the kept configuration once the cluster places by
// the loaded one; it reports whether it did.
func (f *Filter) dropPrevLocked(s ringState) bool {
	if f.prevID == 0 || s.placeBy == 0 || s.placeBy != f.cfgID {
		return false
	}
	f.prevCfgs, f.prevID = nil, 0
	return true
}

// viewConfig is the configuration a re-filter's fences and gains are made
// under (the config argument of Handoff): the one targets are placed by,
// or 0 for a node that owns nothing, whose fence holds under any
// configuration (a peer that steps aside runs one the others cannot name).
func viewConfig(s ringState, placeID uint64) uint64 {
	if !s.participant {
		return 0
	}
	return placeID
}

// handoffWork is what a re-filter leaves for Run to do with Handoff.
type handoffWork struct {
	lost, activated []Unit
	ring            Placement
	config          uint64
	participant     bool
}

// StopWait bounds how long a lost target's scrape loop is given to stop
// (the scrape manager applies new targets at its next reload tick) before
// the fence makes its appenders write nothing: a scrape that the target
// served but the fence discarded is a lost sample.
const StopWait = time.Second

// handoff runs the hand-off steps of the last re-filters, in the order that
// keeps the receiver's view ordered: un-fence and hold gained units before
// the scrape manager may start them; pass on the targets without the lost
// units, let their loops stop, fence them (whatever is still running is cut
// off at the appender), and only then announce the fence.
func (f *Filter) handoff(ctx context.Context, unsent *map[string][]*targetgroup.Group, out chan<- map[string][]*targetgroup.Group) {
	h := f.opts.Handoff
	f.mu.Lock()
	w := f.work
	f.work = nil
	f.mu.Unlock()
	if h == nil || w == nil {
		return
	}
	if len(w.activated) > 0 {
		h.Activate(w.ring, w.config, w.activated)
	}
	if len(w.lost) > 0 {
		if *unsent != nil {
			select {
			case out <- *unsent:
				*unsent = nil
			case <-ctx.Done():
				return
			}
		}
		if f.mgr != nil {
			f.awaitStopped(ctx, w.lost)
		}
		if err := h.Fence(ctx, w.lost); err != nil {
			f.logger.Warn("Fencing handed-off targets did not complete", "err", err)
			return
		}
	}
	h.Fenced(w.ring, w.config, w.participant)
}

// awaitStopped waits, for at most StopWait, until the scrape manager has
// none of units active any more.
func (f *Filter) awaitStopped(ctx context.Context, units []Unit) {
	want := make(map[string]struct{}, len(units))
	for _, u := range units {
		want[u.String()] = struct{}{}
	}
	deadline := time.NewTimer(StopWait)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		running := 0
		for _, ts := range f.mgr.TargetsActive() {
			for _, t := range ts {
				if _, ok := want[t.GetValue(UnitLabel)]; ok {
					running++
				}
			}
		}
		if running == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			f.logger.Debug("Scrape loops of handed-off targets still running; fencing them anyway", "running", running)
			return
		case <-tick.C:
		}
	}
}

// decorate returns tl with the hand-off unit and the replica label set:
// to replica when given (all-mode targets: the node name), else to the rank
// with a replication factor above 1.
func (f *Filter) decorate(tl model.LabelSet, u Unit, rf int, replica string) model.LabelSet {
	out := make(model.LabelSet, len(tl)+2)
	maps.Copy(out, tl)
	out[UnitLabel] = model.LabelValue(u.String())
	if replica != "" && f.opts.ReplicaLabel != "" {
		out[model.LabelName(f.opts.ReplicaLabel)] = model.LabelValue(replica)
	} else if rf > 1 && f.opts.ReplicaLabel != "" {
		out[model.LabelName(f.opts.ReplicaLabel)] = model.LabelValue(strconv.Itoa(u.Rank))
	}
	return out
}

// disableStaleness finds the running scrape targets with the given keys and
// tells the scrape manager not to write end-of-run staleness markers for
// them: their new owner continues the series. A running target is known by
// its unit label where it has one: after a reload the scrape manager may
// run it with the new configuration (a new URL) until the next sync.
func (f *Filter) disableStaleness(mgr ScrapeManager, keys map[uint64]struct{}) {
	for job, targets := range mgr.TargetsActive() {
		var moved []*promscrape.Target
		for _, t := range targets {
			k := TargetKey(job, t.URL())
			if u, err := ParseUnit(t.GetValue(UnitLabel)); err == nil {
				k = u.Key
			}
			if _, ok := keys[k]; ok {
				moved = append(moved, t)
			}
		}
		if len(moved) > 0 {
			mgr.DisableEndOfRunStalenessMarkers(job, moved)
			f.logger.Debug("Handing off targets without staleness markers", "job", job, "count", len(moved))
		}
	}
}

// Targets returns every discovered target of every configured job with its
// ownership as of the last re-filter, sorted by job, scrape URL and labels.
func (f *Filter) Targets() []TargetInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	var (
		res []TargetInfo
		lb  = labels.NewBuilder(labels.EmptyLabels())
		s   = f.applied
	)
	for job, js := range f.jobs {
		cfg := f.cfgs[job]
		if cfg == nil {
			continue
		}
		for _, e := range js.entries {
			g := js.groups[e.group]
			promscrape.PopulateDiscoveredLabels(lb, cfg, g.Targets[e.index], g.Labels)
			ti := TargetInfo{
				Job:              job,
				ScrapeURL:        e.url,
				Key:              e.key,
				Labels:           e.labels,
				DiscoveredLabels: lb.Labels(),
			}
			if e.reason != "" {
				ti.DropReason = e.reason
				res = append(res, ti)
				continue
			}
			ti.Owners = s.ownersOf(e, nil)
			ti.Sharding = e.labels.Get(ShardingLabel)
			_, ti.Owned = f.owned[e.key]
			_, waiting := f.waiting[e.key]
			switch {
			case ti.Owned:
			case waiting:
				ti.DropReason = ReasonWaitingHandoff
			case !s.participant:
				ti.DropReason = ReasonNotParticipant
			case len(ti.Owners) == 0:
				ti.DropReason = ReasonNoOwner
			default:
				ti.DropReason = reasonOwnedByPrefix + strings.Join(ti.Owners, ", ")
			}
			res = append(res, ti)
		}
	}
	slices.SortStableFunc(res, func(a, b TargetInfo) int {
		return cmp.Or(
			strings.Compare(a.Job, b.Job),
			strings.Compare(a.ScrapeURL, b.ScrapeURL),
			labels.Compare(a.Labels, b.Labels),
			labels.Compare(a.DiscoveredLabels, b.DiscoveredLabels),
		)
	})
	return res
}

// OwnedCounts returns, for every node on the current ring, how many distinct
// discovered targets it owns (counting replicas: with a replication factor
// of 2 every target counts for two nodes). With clustering disabled the
// local node owns everything.
func (f *Filter) OwnedCounts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	counts := map[string]int{}
	if f.applied.ring != nil {
		for _, n := range f.applied.ring.Nodes() {
			counts[n] = 0
		}
	}
	buf := make([]string, 0, f.applied.rf)
	seen := make(map[uint64]struct{}, len(f.known))
	for job, js := range f.jobs {
		if f.cfgs[job] == nil {
			continue
		}
		for _, e := range js.entries {
			if _, dup := seen[e.key]; dup || e.reason != "" {
				continue
			}
			seen[e.key] = struct{}{}
			for _, o := range f.applied.ownersOf(e, buf) {
				counts[o]++
			}
		}
	}
	return counts
}

// OwnedCount returns how many distinct discovered targets node owns under
// the current ring; see OwnedCounts.
func (f *Filter) OwnedCount(node string) int {
	return f.OwnedCounts()[node]
}

// DiscoverySettle is how long a job whose discovery updates have held no
// target group counts as not discovered yet. Prometheus' discovery manager
// sends an empty list for a job whose discoverers have not reported, at
// once on start, and the real targets in a later update, seconds later on
// a busy machine; a job that has no targets at all looks the same, so the
// empty list is believed after this long. It is the manager's longest
// pause between two updates.
const DiscoverySettle = 5 * time.Second

// Waiting returns how many targets this node owns but holds back until
// their previous owners have handed them off, and whether the last
// re-filter placed the discovered targets on a ring with this node as a
// participant: before that, none can wait yet. Discovered means every
// job's discovery update has been placed and held target groups, or held
// none for DiscoverySettle.
func (f *Filter) Waiting() (waiting int, placed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	discovered := len(f.jobs) > 0 || len(f.cfgs) == 0
	now := time.Now()
	for _, js := range f.jobs {
		settled := js.reported || !js.emptySince.IsZero() && now.Sub(js.emptySince) >= DiscoverySettle
		discovered = discovered && !js.hasNext && settled
	}
	return len(f.waiting), f.applied.ring != nil && f.applied.participant && discovered
}

// Owned returns how many targets this node passes on to its scrape manager
// now.
func (f *Filter) Owned() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.owned)
}
