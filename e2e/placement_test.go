package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// clusterTarget is one entry of /api/v1/cluster/targets.
type clusterTarget struct {
	Job       string   `json:"job"`
	ScrapeURL string   `json:"scrapeUrl"`
	Owners    []string `json:"owners"`
	ScrapedBy []string `json:"scrapedBy"`
	Status    string   `json:"status"`
}

type clusterTargetsResponse struct {
	Status string `json:"status"`
	Data   struct {
		Targets     []clusterTarget `json:"targets"`
		Unreachable []string        `json:"unreachable"`
	} `json:"data"`
}

// checkPlacement asks node a for the cluster-wide view and checks that every
// wanted target is there, owned by rf nodes and scraped by exactly them.
func checkPlacement(a *agent, want []*target, rf int) error {
	var r clusterTargetsResponse
	if err := a.getJSON("/api/v1/cluster/targets", &r); err != nil {
		return err
	}
	if r.Status != "success" || len(r.Data.Unreachable) > 0 {
		return fmt.Errorf("%s: status %q, unreachable peers %v", a.spec.name, r.Status, r.Data.Unreachable)
	}
	byURL := map[string]clusterTarget{}
	for _, ct := range r.Data.Targets {
		byURL[ct.ScrapeURL] = ct
	}
	var problems []string
	for _, tg := range want {
		ct, ok := byURL["http://"+tg.addr+"/metrics"]
		switch {
		case !ok:
			problems = append(problems, tg.addr+" missing")
		case len(ct.Owners) != rf:
			problems = append(problems, fmt.Sprintf("%s has owners %v, want %d", tg.addr, ct.Owners, rf))
		case ct.Status != "ok":
			problems = append(problems, fmt.Sprintf("%s is %s: owners %v, scraped by %v", tg.addr, ct.Status, ct.Owners, ct.ScrapedBy))
		case !slices.Equal(sorted(ct.Owners), sorted(ct.ScrapedBy)):
			problems = append(problems, fmt.Sprintf("%s owners %v but scraped by %v", tg.addr, ct.Owners, ct.ScrapedBy))
		}
	}
	if len(problems) > 0 {
		if len(problems) > 6 {
			problems = append(problems[:6], fmt.Sprintf("... and %d more", len(problems)-6))
		}
		return fmt.Errorf("%s /api/v1/cluster/targets: %s", a.spec.name, strings.Join(problems, "; "))
	}
	return nil
}

func sorted(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// TestClusterTargetsView checks that every node answers the cluster-wide
// view the same way: each target with its ring owner, scraped by exactly it.
func TestClusterTargetsView(t *testing.T) {
	needBinary(t)
	targets, _, nodes, owners := shardedSetup(t, 3)
	for _, a := range nodes {
		eventually(t, convergeTimeout, a.spec.name+"'s cluster-wide view", func() error {
			return checkPlacement(a, targets, 1)
		})
	}
	// The view's owners are the nodes really scraping each target.
	var r clusterTargetsResponse
	if err := nodes[0].getJSON("/api/v1/cluster/targets", &r); err != nil {
		fatal(t, err)
	}
	for _, ct := range r.Data.Targets {
		inst := strings.TrimSuffix(strings.TrimPrefix(ct.ScrapeURL, "http://"), "/metrics")
		if len(ct.ScrapedBy) != 1 || ct.ScrapedBy[0] != owners[inst] {
			errorf(t, "%s: view says scraped by %v, the targets APIs say %s", inst, ct.ScrapedBy, owners[inst])
		}
	}
}

// TestReplicationFactorTwo runs three replicas with
// --cluster.replication-factor=2 and one shared configuration with the
// default queue_config: every target is scraped by exactly two distinct
// nodes, each adds its rank for the target as the replica target label, and
// the receiver (which refuses duplicates and out-of-order samples) gets
// exactly one clean series per target and rank, also across a scale-out
// that moves ranks between nodes.
func TestReplicationFactorTwo(t *testing.T) {
	replicationFactorTwo(t, "ring")
}

// TestReplicationFactorTwoBounded is the same under the load-aware
// placement: the owners publish the primaries' weights, NewBounded places
// two copies of every target, and the moves the weights cause come before
// the scale-out, so both the weight-driven moves and the scale-out's hand
// ranks over.
func TestReplicationFactorTwoBounded(t *testing.T) {
	replicationFactorTwo(t, "bounded")
}

func replicationFactorTwo(t *testing.T, placement string) {
	needBinary(t)
	const n, rf, count = 3, 2, 30
	targets := startTargets(t, count, 2)
	recv := startReceiver(t)
	cfg := writeConfig(t, t.TempDir(), configOpts{
		targets:        targetAddrs(targets),
		remoteWriteURL: recv.writeURL(),
		defaultQueue:   true,
	})
	nodes := make([]*agent, n+1)
	for i := range nodes {
		nodes[i] = newAgent(t, agentSpec{
			name: fmt.Sprintf("node-%d", i+1), ip: fmt.Sprintf("127.0.0.%d", i+1), config: cfg, cluster: true, waitForSize: n,
			extraArgs: []string{fmt.Sprintf("--cluster.replication-factor=%d", rf), "--cluster.placement=" + placement},
		})
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.join = append(a.join, b.gossipAddr)
			}
		}
	}
	startCluster(t, nodes[:n])

	converged := func(nodes []*agent) {
		eventually(t, convergeTimeout, "every target scraped by two nodes", func() error {
			scrapers := map[string][]string{}
			for _, a := range nodes {
				active, err := a.activeTargets()
				if err != nil {
					return err
				}
				for inst, at := range active {
					if at.Health != "up" {
						return fmt.Errorf("%s on %s: health %q", inst, a.spec.name, at.Health)
					}
					scrapers[inst] = append(scrapers[inst], a.spec.name)
				}
			}
			for _, tg := range targets {
				if got := scrapers[tg.addr]; len(got) != rf {
					return fmt.Errorf("%s scraped by %v, want %d nodes", tg.addr, got, rf)
				}
			}
			return checkPlacement(nodes[0], targets, rf)
		})
	}
	converged(nodes[:n])
	waitServed(t, targets, time.Now(), 3*rf, convergeTimeout)
	if placement == "bounded" {
		waitWeightsPlaced(t, nodes[:n], len(targets))
		converged(nodes[:n])
	}

	// Scale out: some ranks move to the newcomer, some from rank 1 to 0.
	nodes[n].start()
	nodes[n].waitReady(startTimeout)
	converged(nodes)

	w0 := time.Now()
	waitServed(t, targets, w0, 3*rf, convergeTimeout)
	waitReceiverCaughtUp(t, recv, targets, w0)
	ups, err := recv.seriesOf("up")
	if err != nil {
		fatal(t, err)
	}
	for inst, g := range byInstance(ups) {
		replicas := map[string]bool{}
		for _, s := range g {
			replicas[s.labels.Get("replica")] = true
		}
		if len(g) != rf || !replicas["0"] || !replicas["1"] {
			errorf(t, "%s: %d up series with replica labels %v, want one for each of the ranks 0 and 1", inst, len(g), replicas)
		}
	}
	if err := checkSeriesClean(ups); err != nil {
		fail(t, err)
	}
	if placement == "bounded" {
		waitWeightsPlaced(t, nodes, len(targets))
	}
	recv.checkNoRejections(t)
	if st := recv.Stats(); st.Dropped != 0 {
		errorf(t, "receiver dropped %d exact duplicates: two nodes wrote the same series", st.Dropped)
	}
	checkNoFailedSamples(t, nodes)
}

// TestWaitForSizeLeavesNoOrphans joins a node that waits for a cluster of
// three to a running node: while it waits it must stay off the ring (a
// viewer), so the running node keeps every target; once the third node
// comes, both share them with nothing orphaned.
func TestWaitForSizeLeavesNoOrphans(t *testing.T) {
	needBinary(t)
	targets := startTargets(t, 12, 0)
	recv := startReceiver(t)
	cfg := writeConfig(t, t.TempDir(), configOpts{targets: targetAddrs(targets), remoteWriteURL: recv.writeURL()})
	nodes := newClusterAgents(t, 3, cfg, 0)
	nodes[1].spec.waitForSize, nodes[2].spec.waitForSize = 3, 3

	nodes[0].start()
	nodes[0].waitReady(startTimeout)
	nodes[1].start()
	nodes[1].waitHTTP(startTimeout)
	eventually(t, convergeTimeout, "node-2 seen as a viewer", func() error {
		pr, err := nodes[0].peers()
		if err != nil {
			return err
		}
		for _, p := range pr.Data.Peers {
			if p.Name == "node-2" && p.State == "viewer" {
				return nil
			}
		}
		return fmt.Errorf("peers: %+v", pr.Data.Peers)
	})
	// Several scrape intervals while node-2 waits: node-1 keeps every target.
	w0 := time.Now()
	waitServed(t, targets, w0, 3, convergeTimeout)
	if err := checkPlacement(nodes[0], targets, 1); err != nil {
		fatalf(t, "while node-2 waits for the cluster size: %v", err)
	}
	if active, err := nodes[1].activeTargets(); err != nil || len(active) != 0 {
		fatalf(t, "node-2 scrapes %d targets while waiting (err %v)", len(active), err)
	}
	resp, err := httpClient.Get(nodes[1].url("/-/ready"))
	if err != nil {
		fatal(t, err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		errorf(t, "node-2 /-/ready = %d while waiting, want 503", resp.StatusCode)
	}

	nodes[2].start()
	for _, a := range nodes {
		a.waitReady(startTimeout)
	}
	waitConverged(t, nodes, targets)
	// The view reuses a peer's answer for up to a second (web's
	// PeerAnswerTTL), and node-1 last asked node-2 while it waited.
	eventually(t, convergeTimeout, "node-1's cluster-wide view without orphans", func() error {
		return checkPlacement(nodes[0], targets, 1)
	})
}
