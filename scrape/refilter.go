package scrape

import (
	"maps"
	"time"

	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/shoal-dev/shoal/placement/gate"
)

// pass is one re-filter's working state: what the steps of refilter
// compute from the Filter's last state and hand to each other.
type pass struct {
	now         time.Time
	prev, cur   ringState
	ringChanged bool
	dropped     bool   // the kept configuration was forgotten
	curID       uint64 // the loaded configuration's ConfigID
	cfgID       uint64 // the view's configuration (viewConfig)
	changed     bool   // the groups to pass on differ from the last ones
	buf         []string

	known  map[uint64]struct{}
	series map[uint64]uint64
	// owned, ownedSeries and ownedURL become the Filter's; rescraped are
	// kept keys whose URL changed, waiting the keys the gate holds back.
	owned       map[uint64]int
	ownedSeries map[uint64]uint64
	ownedURL    map[uint64]string
	rescraped   map[uint64]struct{}
	waiting     map[uint64]bool // key -> new when first seen (Filter.waiting)
	// cands are the gained keys, first seen at candEntry (same index).
	cands     []gate.Candidate
	candEntry []entry
	movedIn   int
	activated []Unit
	next      time.Time
	// handoff are the lost keys still discovered (under this key or,
	// moved, under another); lost are their units.
	handoff map[uint64]struct{}
	lost    []Unit
}

// refilter recomputes ownership at time now. It returns the groups to pass
// on, whether they differ from the last ones, and when the gate wants to be
// asked again (zero if never). Targets that moved away are handed off to
// the scrape manager before it returns.
func (f *Filter) refilter(now time.Time) (out map[string][]*targetgroup.Group, changed bool, next time.Time) {
	f.mu.Lock()
	f.refilters++
	p := &pass{now: now, prev: f.applied, cur: f.latest}
	p.ringChanged = p.prev != p.cur
	f.recomputeKeys(p)
	f.rebuildKnown(p)
	f.decideOwned(p)
	out = f.buildGroups(p)
	f.collectLost(p)
	f.owned, f.waiting, f.known, f.applied = p.owned, p.waiting, p.known, p.cur
	f.series, f.ownedSeries, f.ownedURL = p.series, p.ownedSeries, p.ownedURL
	f.leaveWork(p)
	p.curID = f.cfgID
	f.mu.Unlock()
	f.publish(p)
	return out, p.changed, p.next
}

// recomputeKeys runs relabelling again for the jobs whose discovery or
// configuration changed, or for every job when the cluster switched the
// configuration it places targets by.
func (f *Filter) recomputeKeys(p *pass) {
	placeCfgs, placeID := f.placingLocked(p.cur)
	p.dropped = f.dropPrevLocked(p.cur)
	if placeID != f.keyedBy {
		for _, js := range f.jobs {
			js.dirty = true
		}
		f.keyedBy = placeID
	}
	p.cfgID = viewConfig(p.cur, placeID)
	p.changed = f.resend
	f.resend = false
	lb := labels.NewBuilder(labels.EmptyLabels())
	for job, js := range f.jobs {
		cfg := f.cfgs[job]
		if cfg == nil || !js.dirty {
			continue
		}
		p.changed = true
		place := cfg
		if placeID != f.cfgID {
			place = placeCfgs[job]
		}
		invalid, err := computeEntries(js, cfg, place, lb)
		f.metrics.invalid.WithLabelValues(job).Set(float64(invalid))
		if invalid > 0 {
			f.logger.Warn("Ignoring invalid targets", "job", job, "count", invalid, "first_err", err)
		}
	}
}

// rebuildKnown collects the valid keys and the series they carry. They
// change only with discovery or configuration: a ring change alone reuses
// the last ones.
func (f *Filter) rebuildKnown(p *pass) {
	if !p.changed {
		p.known, p.series = f.known, f.series
		return
	}
	p.known = make(map[uint64]struct{}, len(f.known))
	p.series = make(map[uint64]uint64, len(f.series))
	f.eachValid(func(_ string, e entry) {
		p.known[e.key] = struct{}{}
		if _, dup := p.series[e.series]; !dup {
			p.series[e.series] = e.key
		}
	})
}

// eachValid calls fn with every valid target of every configured job.
func (f *Filter) eachValid(fn func(job string, e entry)) {
	for job, js := range f.jobs {
		if f.cfgs[job] == nil {
			continue
		}
		for _, e := range js.entries {
			if e.reason == "" {
				fn(job, e)
			}
		}
	}
}

// decideOwned settles which keys this node scrapes after the pass: the ones
// it scrapes at the same rank already go on; the other ones it owns under
// the current view are gained, and the hand-off gate (FilterOptions.Handoff)
// decides which of them start now. Without a gate every one starts.
func (f *Filter) decideOwned(p *pass) {
	p.buf = make([]string, 0, max(p.cur.rf, p.prev.rf))
	p.owned = make(map[uint64]int, len(f.owned))
	p.ownedSeries = make(map[uint64]uint64, len(f.owned))
	p.ownedURL = make(map[uint64]string, len(f.owned))
	p.waiting = map[uint64]bool{}
	decided := make(map[uint64]struct{}, len(f.owned))
	f.eachValid(func(_ string, e entry) {
		rank, mine := p.cur.rankOf(e, p.buf)
		if _, dup := decided[e.key]; dup || !mine {
			return // a duplicate target was decided with the first
		}
		decided[e.key] = struct{}{}
		if oldRank, ok := f.owned[e.key]; ok && oldRank == rank {
			f.keep(p, e, rank)
			return
		}
		p.cands = append(p.cands, f.candidate(p, e, rank))
		p.candEntry = append(p.candEntry, e)
	})
	start := f.admit(p)
	for i, c := range p.cands {
		if !start[i] {
			p.waiting[c.Key] = !c.Known
			continue
		}
		f.own(p, p.candEntry[i], c.Rank)
		if c.Known {
			p.movedIn++
		}
		if f.opts.Handoff != nil {
			p.activated = append(p.activated, Unit{Key: c.Key, Rank: c.Rank})
		}
	}
}

// keep goes on scraping e at rank; a new URL under the same key and series
// (a reload while the cluster places by the kept configuration) replaces
// only the scrape loop, and the new one continues the series.
func (f *Filter) keep(p *pass, e entry, rank int) {
	if f.ownedURL[e.key] != e.url && f.ownedSeries[e.key] == e.series {
		if p.rescraped == nil {
			p.rescraped = map[uint64]struct{}{}
		}
		p.rescraped[e.key] = struct{}{}
	}
	f.own(p, e, rank)
}

func (f *Filter) own(p *pass, e entry, rank int) {
	p.owned[e.key] = rank
	p.ownedSeries[e.key] = e.series
	p.ownedURL[e.key] = e.url
}

// candidate describes e, gained at rank, for the gate.
func (f *Filter) candidate(p *pass, e entry, rank int) gate.Candidate {
	_, wasOwned := f.owned[e.key]
	_, known := f.known[e.key]
	if f.waiting[e.key] {
		known = false // new when first seen, held back since
	}
	c := gate.Candidate{Key: e.key, Rank: rank, Known: known, Placed: e.mode == modeRing}
	if known || wasOwned {
		return c
	}
	switch moved, byOther := f.movedFrom(p, e); {
	case moved && byOther:
		c.Move = gate.MovedFromPeer
	case moved && p.prev.participant:
		c.Move = gate.MovedHere
	}
	return c
}

// movedFrom reports whether the series of e was known before under another
// key, now gone (a reload or relabelling changed the target's URL), and
// whether a peer may still be scraping it under that key.
func (f *Filter) movedFrom(p *pass, e entry) (moved, byOther bool) {
	old, ok := f.series[e.series]
	if !ok || old == e.key {
		return false, false
	}
	if _, still := p.known[old]; still {
		return false, false
	}
	return true, p.prev.ownedByOther(entry{key: old}, p.buf)
}

// admit asks the gate which candidates start now; without one, all do.
func (f *Filter) admit(p *pass) []bool {
	h := f.opts.Handoff
	if h == nil {
		start := make([]bool, len(p.cands))
		for i := range start {
			start[i] = true
		}
		return start
	}
	a := h.Admit(p.now, p.cur.ring, p.cfgID, p.cands)
	p.next = a.Next
	return a.Start
}

// buildGroups returns every configured job's groups with only the owned
// targets, decorated with their hand-off units, and sets the per-job
// metrics.
func (f *Filter) buildGroups(p *pass) map[string][]*targetgroup.Group {
	out := make(map[string][]*targetgroup.Group, len(f.jobs))
	for job, js := range f.jobs {
		if f.cfgs[job] == nil {
			continue
		}
		discovered := 0
		filtered := make([]*targetgroup.Group, len(js.groups))
		for gi, g := range js.groups {
			if g == nil {
				filtered[gi] = &targetgroup.Group{}
				continue
			}
			discovered += len(g.Targets)
			filtered[gi] = &targetgroup.Group{Source: g.Source, Labels: g.Labels}
		}
		f.metrics.discovered.WithLabelValues(job).Set(float64(discovered))
		owned := map[uint64]struct{}{}
		for _, e := range js.entries {
			rank, ok := p.owned[e.key]
			if e.reason != "" || !ok {
				continue
			}
			owned[e.key] = struct{}{}
			tl := js.groups[e.group].Targets[e.index]
			if f.opts.Handoff != nil {
				replica := ""
				if e.mode == modeAll && p.cur.ring != nil {
					replica = p.cur.self
				}
				tl = f.decorate(tl, Unit{Key: e.key, Rank: rank}, p.cur.rf, replica)
			}
			filtered[e.group].Targets = append(filtered[e.group].Targets, tl)
		}
		out[job] = filtered
		f.metrics.owned.WithLabelValues(job).Set(float64(len(owned)))
	}
	return out
}

// collectLost finds the keys this node scraped and no longer does: those
// still discovered (or whose series is, under another key) are handed off,
// the rest simply went away.
func (f *Filter) collectLost(p *pass) {
	for k, r := range f.owned {
		if nr, still := p.owned[k]; still && nr == r {
			continue
		}
		p.changed = true
		_, stillKnown := p.known[k]
		s, hadSeries := f.ownedSeries[k]
		nk, seriesKnown := p.series[s]
		if stillKnown || (hadSeries && seriesKnown && nk != k) {
			if p.handoff == nil {
				p.handoff = map[uint64]struct{}{}
			}
			p.handoff[k] = struct{}{}
			p.lost = append(p.lost, Unit{Key: k, Rank: r})
		}
	}
	if p.movedIn > 0 || len(p.owned) != len(f.owned) {
		p.changed = true
	}
}

// leaveWork leaves the pass's hand-off steps for Run (see handoff).
func (f *Filter) leaveWork(p *pass) {
	if f.opts.Handoff == nil {
		return
	}
	if f.work == nil {
		f.work = &handoffWork{}
	}
	f.work.lost = append(f.work.lost, p.lost...)
	f.work.activated = append(f.work.activated, p.activated...)
	f.work.ring, f.work.config, f.work.participant = p.cur.ring, p.cfgID, p.cur.participant
}

// publish reports the pass outside the lock: the configuration the node
// now places by, metrics, staleness markers of handed-off targets, and a
// log line for moves.
func (f *Filter) publish(p *pass) {
	if h := f.opts.Handoff; p.dropped && h != nil {
		h.Configured(p.curID, 0)
	}
	if p.ringChanged {
		f.metrics.setRing(p.cur)
	}
	if mgr := f.mgr; len(p.handoff)+len(p.rescraped) > 0 && mgr != nil {
		keys := maps.Clone(p.handoff)
		if keys == nil {
			keys = map[uint64]struct{}{}
		}
		maps.Copy(keys, p.rescraped)
		f.disableStaleness(mgr, keys)
	}
	f.logger.Debug("Placed the discovered targets", "owned", len(p.owned), "waiting_for_handoff", len(p.waiting),
		"started", len(p.activated), "discovered", len(p.known), "ring_nodes", ringLen(p.cur.ring),
		"participant", p.cur.participant, "ring_changed", p.ringChanged)
	f.metrics.movedIn.Add(float64(p.movedIn))
	f.metrics.movedOut.Add(float64(len(p.handoff)))
	if p.movedIn > 0 || len(p.handoff) > 0 {
		f.logger.Info("Ring change moved targets",
			"moved_in", p.movedIn, "moved_out", len(p.handoff), "waiting_for_handoff", len(p.waiting),
			"owned", len(p.owned), "discovered", len(p.known), "ring_nodes", ringLen(p.cur.ring),
			"participant", p.cur.participant)
	} else if len(p.waiting) > 0 && p.ringChanged {
		f.logger.Info("Ring change: holding gained targets back for hand-off",
			"waiting_for_handoff", len(p.waiting))
	}
}
