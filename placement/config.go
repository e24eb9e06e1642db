package placement

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/shoal-dev/shoal/cluster"
)

// Scrape configuration agreement: place targets by the configuration the
// cluster agrees on, scrape them with this node's own.
//
// A configuration change never reaches every replica at once (a ConfigMap
// refreshed pod by pod, a rolling restart). A change of scheme, path,
// params or relabelling moves target keys, and two replicas that placed
// targets by different keys would scrape some twice and others not at all.
// So every node gossips two scrape configuration ids (cluster.ConfigIDs):
// the one it has loaded (cur) and the one it was placing by when it loaded
// that (prev; the scrape filter keeps its configs at hand). From the
// participants' ids every node decides, the same way, which configuration
// the cluster places by (agree):
//
//  1. every participant announces the same cur: that one;
//  2. else an id every participant still holds (its cur or its prev): that
//     one, so that a change reaching replicas apart moves nothing until all
//     have it, and then moves every key in one generation;
//  3. else, or once 2 has lasted --cluster.handoff-timeout (a replica kept
//     on another configuration): the cur most participants announce (a tie
//     goes to the one more of them hold, then to the longest-running
//     participant's: the one the cluster ran before).
//
// A participant that holds neither id steps aside: it is left off the ring
// and owns nothing (its targets are handed off as on any ring change), so
// that a replica on another configuration scrapes nothing rather than
// something twice. A node that places by its own configuration forgets the
// kept one, so that the timeout's decision, once taken by one node, is what
// every node reads from the gossip (a restarted replica, which has no kept
// configuration, included). Peers that announce no ids (older versions)
// take part in no decision and never step aside.

// shortID is the 32-bit digest of a scrape.ConfigID that is gossiped (node
// metadata is small); 0 stays 0.
func shortID(id uint64) uint64 {
	if id == 0 {
		return 0
	}
	if s := (id ^ id>>32) & 0xffffffff; s != 0 {
		return s
	}
	return 1
}

// Rules of agree, for logs and the status API.
const (
	ruleOwn       = "own"       // no participant announces a configuration
	ruleUnanimous = "unanimous" // every participant runs it
	ruleCommon    = "common"    // every participant still holds it
	ruleMajority  = "majority"  // most participants run it
)

// agreement is which scrape configuration the participants place targets
// by, and who cannot.
type agreement struct {
	id    uint64   // short id; 0 when no participant announces one
	rule  string   // how it was chosen (rule*)
	aside []string // participants that hold neither id, sorted
	// split: the participants announce different configurations.
	split bool
}

func (a agreement) isAside(name string) bool {
	_, ok := slices.BinarySearch(a.aside, name)
	return ok
}

// placers returns peers without the participants that step aside.
func (a agreement) placers(peers []cluster.Peer) []cluster.Peer {
	if len(a.aside) == 0 {
		return peers
	}
	out := make([]cluster.Peer, 0, len(peers))
	for _, p := range peers {
		if !a.isAside(p.Name) {
			out = append(out, p)
		}
	}
	return out
}

// agree decides, from the live peers (self included), which scrape
// configuration the participants place targets by; timedOut skips the
// common-id rule. Only participants that announce ids vote.
func agree(peers []cluster.Peer, timedOut bool) agreement {
	var voters []cluster.Peer
	for _, p := range peers {
		if p.State == cluster.Participant && p.ScrapeConfig.Cur != 0 {
			voters = append(voters, p)
		}
	}
	if len(voters) == 0 {
		return agreement{rule: ruleOwn}
	}
	a := agreement{}
	switch {
	case !splitCur(voters):
		a.id, a.rule = voters[0].ScrapeConfig.Cur, ruleUnanimous
	default:
		a.split = true
		if id := commonID(voters); id != 0 && !timedOut {
			a.id, a.rule = id, ruleCommon
		} else {
			a.id, a.rule = majorityCur(voters), ruleMajority
		}
	}
	for _, p := range voters {
		if p.ScrapeConfig.Cur != a.id && p.ScrapeConfig.Prev != a.id {
			a.aside = append(a.aside, p.Name)
		}
	}
	slices.Sort(a.aside)
	return a
}

func splitCur(voters []cluster.Peer) bool {
	for _, p := range voters[1:] {
		if p.ScrapeConfig.Cur != voters[0].ScrapeConfig.Cur {
			return true
		}
	}
	return false
}

// commonID is an id in every voter's {cur, prev} (0: none). Of several it
// prefers one some voter keeps as prev (the older: it still places by it),
// then the smaller.
func commonID(voters []cluster.Peer) uint64 {
	var common []uint64
	for _, id := range []uint64{voters[0].ScrapeConfig.Cur, voters[0].ScrapeConfig.Prev} {
		if id == 0 {
			continue
		}
		all := true
		for _, p := range voters[1:] {
			if p.ScrapeConfig.Cur != id && p.ScrapeConfig.Prev != id {
				all = false
				break
			}
		}
		if all {
			common = append(common, id)
		}
	}
	if len(common) == 0 {
		return 0
	}
	isPrev := func(id uint64) bool {
		return slices.ContainsFunc(voters, func(p cluster.Peer) bool { return p.ScrapeConfig.Prev == id })
	}
	slices.SortFunc(common, func(x, y uint64) int {
		px, py := isPrev(x), isPrev(y)
		if px != py {
			if px {
				return -1
			}
			return 1
		}
		return cmp.Compare(x, y)
	})
	return common[0]
}

// majorityCur is the cur most voters announce. A tie goes to the one more
// voters hold (run or kept: fewer step aside when a second change starts
// rolling while a replica is kept on an old one), then to the one whose
// announcers include the longest-running voter (the configuration the
// cluster ran before a rolling restart began), then to the smaller id.
func majorityCur(voters []cluster.Peer) uint64 {
	count, held := map[uint64]int{}, map[uint64]int{}
	oldest := map[uint64]time.Time{}
	for _, p := range voters {
		id := p.ScrapeConfig.Cur
		count[id]++
		if t, ok := oldest[id]; !ok || p.StartTime.Before(t) {
			oldest[id] = p.StartTime
		}
	}
	for _, p := range voters {
		for id := range count {
			if p.ScrapeConfig.Cur == id || p.ScrapeConfig.Prev == id {
				held[id]++
			}
		}
	}
	ids := slices.Collect(maps.Keys(count))
	slices.SortFunc(ids, func(x, y uint64) int {
		return cmp.Or(
			cmp.Compare(count[y], count[x]),
			cmp.Compare(held[y], held[x]),
			oldest[x].Compare(oldest[y]),
			cmp.Compare(x, y),
		)
	})
	return ids[0]
}

// configState is the Coordinator's part of the agreement: the ids this node
// announces and what it decided last. Guarded by Coordinator.mu.
type configState struct {
	cur, prev uint64 // scrape.ConfigID of the loaded and the kept configuration
	splitFrom time.Time
	timedOut  bool
	last      agreement
	drift     []string
}

// Configured implements scrape.Handoff: the filter loaded cur and keeps
// prev to place by. They are gossiped as short ids.
func (c *Coordinator) Configured(cur, prev uint64) {
	c.mu.Lock()
	c.cfg.cur, c.cfg.prev = cur, prev
	c.mu.Unlock()
	c.cl.SetScrapeConfig(cluster.ConfigIDs{Cur: shortID(cur), Prev: shortID(prev)})
	c.wake()
}

// agreeOn decides the agreement on peers at now, keeping the split's clock
// (--cluster.handoff-timeout), and reports changes in logs and metrics. It
// returns the agreement and the ConfigID the filter places by.
func (c *Coordinator) agreeOn(peers []cluster.Peer) (agreement, uint64) {
	now := c.now()
	c.mu.Lock()
	st := &c.cfg
	a := agree(peers, st.timedOut)
	switch {
	case !a.split:
		st.splitFrom, st.timedOut = time.Time{}, false
	case st.splitFrom.IsZero():
		st.splitFrom = now
	}
	expired := a.split && !st.timedOut && !now.Before(st.splitFrom.Add(c.opts.HandoffTimeout))
	if expired {
		st.timedOut = true
		a = agree(peers, true)
	}
	prev := st.last
	st.last = a
	cur := st.cur
	placeBy := cur
	if a.id != 0 && shortID(st.prev) == a.id && shortID(cur) != a.id {
		placeBy = st.prev
	}
	st.drift = drifted(peers, c.opts.NodeName, shortID(cur))
	drift := st.drift
	self := c.opts.NodeName
	c.mu.Unlock()

	c.metrics.driftPeers.Set(float64(len(drift)))
	aside := a.isAside(self)
	c.metrics.steppedAside.Set(b2f(aside))
	c.metrics.placingByPrev.Set(b2f(placeBy != cur))
	if expired {
		c.logger.Warn("Participants have run different scrape configurations for longer than --cluster.handoff-timeout; placing targets by the one most participants run",
			"timeout", c.opts.HandoffTimeout, "config", fmt.Sprintf("%08x", a.id), "stepping_aside", a.aside)
	}
	if a.id != prev.id || !slices.Equal(a.aside, prev.aside) {
		c.logger.Info("Placing targets by the scrape configuration the cluster agrees on",
			"config", fmt.Sprintf("%08x", a.id), "rule", a.rule, "own", fmt.Sprintf("%08x", shortID(cur)),
			"placing_by_previous", placeBy != cur, "stepping_aside", a.aside)
		if aside && !prev.isAside(self) {
			c.logger.Warn("Stepping aside: this node runs a scrape configuration the cluster does not place targets by; it hands its targets off and scrapes nothing until it loads the cluster's",
				"config", fmt.Sprintf("%08x", a.id))
		}
	}
	return a, placeBy
}

// configWakeLocked is how long until the split's timeout is due (0: none).
func (c *Coordinator) configWakeLocked(now time.Time) time.Duration {
	st := c.cfg
	if !st.last.split || st.timedOut || st.splitFrom.IsZero() {
		return 0
	}
	if d := st.splitFrom.Add(c.opts.HandoffTimeout).Sub(now); d > 0 {
		return d
	}
	return time.Nanosecond
}

// drifted lists, sorted, the live peers (not terminating) that announce
// another scrape configuration than cur; peers that announce none (older
// versions) are not listed.
func drifted(peers []cluster.Peer, self string, cur uint64) []string {
	var out []string
	for _, p := range peers {
		if p.Self || p.Name == self || p.State == cluster.Terminating || p.ScrapeConfig.Cur == 0 {
			continue
		}
		if p.ScrapeConfig.Cur != cur {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

// ConfigStatus is the scrape configuration agreement as this node sees it.
type ConfigStatus struct {
	// Current and Previous are this node's loaded and kept configurations
	// (short ids, hexadecimal; Previous empty when none); PlacingBy is the
	// one the cluster places targets by, and Rule how it was chosen.
	Current, Previous, PlacingBy, Rule string
	// SteppedAside: this node holds neither, and owns nothing.
	SteppedAside bool
	// Drift lists the live peers that run another configuration.
	Drift []string
}

// ConfigStatus returns the agreement last decided.
func (c *Coordinator) ConfigStatus() ConfigStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.cfg
	hex := func(id uint64) string {
		if id == 0 {
			return ""
		}
		return fmt.Sprintf("%08x", id)
	}
	return ConfigStatus{
		Current: hex(shortID(st.cur)), Previous: hex(shortID(st.prev)),
		PlacingBy: hex(st.last.id), Rule: st.last.rule,
		SteppedAside: st.last.isAside(c.opts.NodeName),
		Drift:        slices.Clone(st.drift),
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
