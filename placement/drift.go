package placement

import (
	"slices"

	"github.com/shoal-dev/shoal/cluster"
)

// Configuration drift: replicas running different scrape configurations.
//
// Keys follow the series (scrape.LabelsKey), so replicas that differ only
// in how targets are scraped (params, path, scheme, clients) agree on every
// owner and nothing waits for them. What they can disagree on is which
// series exist: a job only some replicas know, or a relabelling that
// changes labels. Each replica scrapes, of the targets it knows, those it
// owns; a target whose owner does not know it is not scraped until the
// owner loads the same configuration, and no target is ever scraped by two
// replicas. A replica that keeps another configuration for good (a file it
// refuses to reload, a pod stuck on an old ConfigMap) is reported here, by
// every peer, until it catches up.
//
// Every fence announces the view it was made under (ViewID: the placement
// generation and the scrape configuration, scrape.ConfigID) together with
// the generation alone, so a peer's configuration can be compared with this
// node's without gossiping anything more: the peer runs this node's
// configuration exactly when its announced view is the view of its
// generation under this node's configuration.

// drifted lists, sorted, the live peers taking part (participant or
// terminating) whose last fence announced a scrape configuration other
// than config. Peers that announce no generation (none fenced yet, or an
// older version) tell nothing and are not listed.
func drifted(peers []cluster.Peer, self string, config uint64) []string {
	var out []string
	for _, p := range peers {
		if p.Self || p.Name == self || p.State == cluster.Viewer {
			continue
		}
		wm := p.Handoff
		if wm.FencedPlacement == 0 || wm.FencedSeq == 0 {
			continue
		}
		if wm.FencedRing != viewID(wm.FencedPlacement, config) {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

// ConfigDrift returns, sorted, the live peers whose last announced scrape
// configuration differs from the one this node fenced last (nil: none, or
// clustering has not fenced yet).
func (c *Coordinator) ConfigDrift() []string {
	c.mu.Lock()
	config, fenced := c.fencedConfig, c.fencedSeq > 0
	c.mu.Unlock()
	if !fenced {
		return nil
	}
	return drifted(c.cl.Peers(), c.opts.NodeName, config)
}

// noteDrift updates the drift metric and logs when the set of drifted peers
// changes.
func (c *Coordinator) noteDrift() {
	d := c.ConfigDrift()
	c.metrics.driftPeers.Set(float64(len(d)))
	c.mu.Lock()
	prev := c.lastDrift
	c.lastDrift = d
	c.mu.Unlock()
	switch {
	case slices.Equal(prev, d):
	case len(d) > 0:
		c.logger.Warn("Peers run another scrape configuration: targets only some replicas know are scraped only where their owner knows them (none twice)",
			"peers", d)
	default:
		c.logger.Info("Every peer runs this node's scrape configuration again")
	}
}
