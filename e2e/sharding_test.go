package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// TestShardingModes runs three replicas given three Kubernetes node names
// and static targets labelled with fake nodes: each replica scrapes exactly
// the node-local targets of its node, a node-local target without a node is
// scraped once (by its ring owner), a ring target once, and an all target by
// every replica, each writing its own series (replica label = node name).
func TestShardingModes(t *testing.T) {
	needBinary(t)
	targets := startTargets(t, 9, 0)
	recv := startReceiver(t)
	nodes := newClusterAgents(t, 3, "", 3)
	kubeNode := map[string]string{}
	for i, a := range nodes {
		kubeNode[a.spec.name] = fmt.Sprintf("kn-%d", i+1)
		a.spec.extraArgs = append(a.spec.extraArgs, "--cluster.kubernetes.node-name="+kubeNode[a.spec.name])
	}
	// targets 0-5: node-local, two per node; 6: node-local without a node;
	// 7: ring (no label); 8: all.
	wantBy := map[string][]string{}
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n", model.Duration(scrapeInterval), model.Duration(scrapeInterval))
	fmt.Fprintf(&b, "scrape_configs:\n  - job_name: sharded\n    static_configs:\n")
	group := func(tg *target, labels map[string]string) {
		fmt.Fprintf(&b, "      - targets: [%q]\n", tg.addr)
		if len(labels) > 0 {
			b.WriteString("        labels:\n")
			for _, k := range sortedKeys(labels) {
				fmt.Fprintf(&b, "          %s: %q\n", k, labels[k])
			}
		}
	}
	for i := range 6 {
		owner := nodes[i/2].spec.name
		group(targets[i], map[string]string{"__shoal_sharding__": "node-local", "__meta_kubernetes_pod_node_name": kubeNode[owner]})
		wantBy[targets[i].addr] = []string{owner}
	}
	group(targets[6], map[string]string{"__shoal_sharding__": "node-local"})
	group(targets[7], nil)
	group(targets[8], map[string]string{"__shoal_sharding__": "all"})
	wantBy[targets[8].addr] = []string{"node-1", "node-2", "node-3"}
	fmt.Fprintf(&b, "remote_write:\n  - url: %q\n", recv.writeURL())
	cfg := filepath.Join(t.TempDir(), "shoal.yml")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
		fatal(t, err)
	}
	for _, a := range nodes {
		a.spec.config = cfg
	}
	startCluster(t, nodes)

	// Who scrapes what, by each replica's own targets API; the node-less and
	// the ring target must have exactly one scraper, the others the wanted ones.
	var got map[string][]string
	eventually(t, convergeTimeout, "targets scraped by the replicas their mode names", func() error {
		got = map[string][]string{}
		for _, a := range nodes {
			active, err := a.activeTargets()
			if err != nil {
				return err
			}
			for inst, at := range active {
				if at.Health != "up" {
					return fmt.Errorf("%s: %s is %s", a.spec.name, inst, at.Health)
				}
				got[inst] = append(got[inst], a.spec.name)
			}
		}
		for _, tg := range targets {
			by := sorted(got[tg.addr])
			if want, ok := wantBy[tg.addr]; ok && !slices.Equal(by, want) {
				return fmt.Errorf("%s scraped by %v, want %v", tg.addr, by, want)
			}
			if _, ok := wantBy[tg.addr]; !ok && len(by) != 1 {
				return fmt.Errorf("%s scraped by %v, want one node", tg.addr, by)
			}
		}
		// The cluster-wide view expects the same scrapers.
		var r clusterTargetsResponse
		if err := nodes[0].getJSON("/api/v1/cluster/targets", &r); err != nil {
			return err
		}
		for _, ct := range r.Data.Targets {
			if ct.Status != "ok" || !slices.Equal(sorted(ct.Owners), sorted(ct.ScrapedBy)) {
				return fmt.Errorf("cluster view: %s is %s: owners %v, scraped by %v", ct.ScrapeURL, ct.Status, ct.Owners, ct.ScrapedBy)
			}
		}
		return nil
	})
	t.Logf("scrapers: %v", got)

	// Over a few intervals every target is served as often as its scrapers
	// say: a second scraper would double it.
	t0 := time.Now()
	waitServed(t, targets, t0, 3, convergeTimeout)
	t1 := time.Now()
	for _, tg := range targets {
		n := tg.servedBetween(t0, t1)
		scrapers := len(got[tg.addr])
		if limit := scrapers * (int(t1.Sub(t0)/scrapeInterval) + 1); n > limit {
			errorf(t, "%s served %d scrapes in %v; %d scrapers allow %d", tg.addr, n, t1.Sub(t0).Round(time.Millisecond), scrapers, limit)
		}
	}

	// At the receiver: the all target is one series per replica, each by
	// its node name; every other target one series; nothing refused.
	eventually(t, convergeTimeout, "every target's up series at the receiver", func() error {
		ups, err := recv.seriesOf("up")
		if err != nil {
			return err
		}
		by := byInstance(ups)
		for _, tg := range targets {
			want := 1
			if tg == targets[8] {
				want = 3
			}
			if len(by[tg.addr]) != want {
				return fmt.Errorf("%s: %d up series, want %d: %s", tg.addr, len(by[tg.addr]), want, seriesLabels(by[tg.addr]))
			}
		}
		var replicas []string
		for _, s := range by[targets[8].addr] {
			replicas = append(replicas, s.labels.Get("replica"))
		}
		if !slices.Equal(sorted(replicas), []string{"node-1", "node-2", "node-3"}) {
			return fmt.Errorf("all target's series carry replica labels %v, want the node names", replicas)
		}
		return nil
	})
	recv.checkNoRejections(t)
}
