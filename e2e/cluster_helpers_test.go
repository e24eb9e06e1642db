package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// newClusterAgents prepares n clustered agents named node-1..node-n on
// 127.0.0.1..127.0.0.n, each joining all the others.
func newClusterAgents(t testing.TB, n int, config string, waitForSize int) []*agent {
	t.Helper()
	nodes := make([]*agent, n)
	for i := range nodes {
		nodes[i] = newAgent(t, agentSpec{
			name:        fmt.Sprintf("node-%d", i+1),
			ip:          fmt.Sprintf("127.0.0.%d", i+1),
			config:      config,
			cluster:     true,
			waitForSize: waitForSize,
		})
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.join = append(a.join, b.gossipAddr)
			}
		}
	}
	return nodes
}

// startCluster starts the agents one after the other (each once its HTTP
// server answers, so that it can join the ones before it) and waits until
// all are ready.
func startCluster(t testing.TB, nodes []*agent) {
	t.Helper()
	for _, a := range nodes {
		a.start()
		a.waitHTTP(startTimeout)
	}
	for _, a := range nodes {
		a.waitReady(startTimeout)
	}
}

// ownership maps each target's instance to the name of the node scraping it.
type ownership map[string]string

// snapshotOwnership reads every node's peers and active targets and checks
// that the cluster has converged: every node sees all the others as
// participants on its ring, every target is active on exactly one node with
// a successful scrape, and every node's view of how many targets each peer
// owns matches what that peer actually scrapes.
func snapshotOwnership(nodes []*agent, want []*target) (ownership, error) {
	names := make([]string, len(nodes))
	for i, a := range nodes {
		names[i] = a.spec.name
	}
	slices.Sort(names)
	owners := ownership{}
	var problems []string
	views := map[string]peersResponse{}
	for _, a := range nodes {
		if err := a.exitedEarly(); err != nil {
			return nil, err
		}
		pr, err := a.peers()
		if err != nil {
			return nil, err
		}
		views[a.spec.name] = pr
		var participants []string
		for _, p := range pr.Data.Peers {
			if p.State == "participant" {
				participants = append(participants, p.Name)
				if p.RingShare <= 0 {
					problems = append(problems, fmt.Sprintf("%s sees participant %s with ring share %v", a.spec.name, p.Name, p.RingShare))
				}
			}
		}
		slices.Sort(participants)
		if !slices.Equal(participants, names) {
			problems = append(problems, fmt.Sprintf("%s sees participants %v, want %v", a.spec.name, participants, names))
		}
		active, err := a.activeTargets()
		if err != nil {
			return nil, err
		}
		for inst, at := range active {
			if prev, dup := owners[inst]; dup {
				problems = append(problems, fmt.Sprintf("%s active on both %s and %s", inst, prev, a.spec.name))
			}
			owners[inst] = a.spec.name
			if at.Health != "up" {
				problems = append(problems, fmt.Sprintf("%s on %s has health %q (%s)", inst, a.spec.name, at.Health, at.LastError))
			}
		}
	}
	actual := map[string]int{}
	for _, n := range owners {
		actual[n]++
	}
	for _, viewer := range sortedKeys(views) {
		for _, p := range views[viewer].Data.Peers {
			if p.State == "participant" && p.OwnedTargets != actual[p.Name] {
				problems = append(problems, fmt.Sprintf("%s says %s owns %d targets; it scrapes %d", viewer, p.Name, p.OwnedTargets, actual[p.Name]))
			}
		}
	}
	wantSet := map[string]bool{}
	for _, tg := range want {
		wantSet[tg.addr] = true
		if _, ok := owners[tg.addr]; !ok {
			problems = append(problems, fmt.Sprintf("%s scraped by nobody", tg.addr))
		}
	}
	for inst := range owners {
		if !wantSet[inst] {
			problems = append(problems, fmt.Sprintf("unexpected active target %s", inst))
		}
	}
	if len(problems) > 0 {
		if len(problems) > 8 {
			problems = append(problems[:8], fmt.Sprintf("... and %d more", len(problems)-8))
		}
		return owners, fmt.Errorf("not converged: %s", strings.Join(problems, "; "))
	}
	return owners, nil
}

// waitConverged polls until snapshotOwnership succeeds and returns the
// ownership it saw.
func waitConverged(t testing.TB, nodes []*agent, want []*target) ownership {
	t.Helper()
	var owners ownership
	start := time.Now()
	eventually(t, convergeTimeout, "cluster converged", func() error {
		var err error
		owners, err = snapshotOwnership(nodes, want)
		return err
	})
	t.Logf("converged after %v: %s", time.Since(start).Round(time.Millisecond), owners.summary())
	return owners
}

func (o ownership) summary() string {
	counts := map[string]int{}
	for _, n := range o {
		counts[n]++
	}
	parts := make([]string, 0, len(counts))
	for _, n := range sortedKeys(counts) {
		parts = append(parts, fmt.Sprintf("%s=%d", n, counts[n]))
	}
	return strings.Join(parts, " ")
}

// targetsOf returns the instances owned by node, sorted.
func (o ownership) targetsOf(node string) []string {
	var out []string
	for inst, n := range o {
		if n == node {
			out = append(out, inst)
		}
	}
	slices.Sort(out)
	return out
}

// waitServed waits until every target has served at least n scrapes after t0.
func waitServed(t testing.TB, targets []*target, t0 time.Time, n int, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("every target scraped %d times after %s", n, t0.Format("15:04:05.000")), func() error {
		for _, tg := range targets {
			if got := tg.servedBetween(t0, time.Now().Add(time.Hour)); got < n {
				return fmt.Errorf("%s scraped %d times", tg.addr, got)
			}
		}
		return nil
	})
}

// waitReceiverCaughtUp waits until the receiver holds, for every target, an
// `up` sample at or after t0.
func waitReceiverCaughtUp(t testing.TB, tr *testReceiver, targets []*target, t0 time.Time) {
	t.Helper()
	eventually(t, convergeTimeout, "receiver has every target's samples up to "+t0.Format("15:04:05.000"), func() error {
		ss, err := tr.seriesOf("up")
		if err != nil {
			return err
		}
		latest := map[string]int64{}
		for _, s := range ss {
			if n := len(s.samples); n > 0 {
				inst := s.labels.Get("instance")
				latest[inst] = max(latest[inst], s.samples[n-1].T)
			}
		}
		for _, tg := range targets {
			if latest[tg.addr] < t0.UnixMilli() {
				return fmt.Errorf("latest up sample of %s is at %s", tg.addr, msTime(latest[tg.addr]))
			}
		}
		return nil
	})
}

// checkServedArrived snapshots how many scrapes each target has served and
// checks that the receiver gets every counter value 1..that count, none
// missing.
func checkServedArrived(t *testing.T, recv *testReceiver, targets []*target) {
	t.Helper()
	served := map[string]int{}
	for _, tg := range targets {
		served[tg.addr] = tg.count()
	}
	eventually(t, convergeTimeout, "receiver has every served counter value", func() error {
		vals, err := recv.counterValues()
		if err != nil {
			return err
		}
		for _, tg := range targets {
			if got := maxValue(vals[tg.addr]); got < served[tg.addr] {
				return fmt.Errorf("%s: receiver has counter up to %d, target served %d", tg.addr, got, served[tg.addr])
			}
		}
		return nil
	})
	vals, err := recv.counterValues()
	if err != nil {
		fatal(t, err)
	}
	for _, tg := range targets {
		missing, err := missingValues(vals[tg.addr], served[tg.addr])
		if err != nil {
			errorf(t, "%s: %v", tg.addr, err)
		}
		if len(missing) > 0 {
			errorf(t, "%s: counter values %v of 1..%d never arrived", tg.addr, missing, served[tg.addr])
		}
	}
}

// killAndAwaitCoverage SIGKILLs victim and waits until every target in
// orphans (addresses) is scraped again. It returns when the kill was and
// how long after it the last orphan was scraped.
func killAndAwaitCoverage(t *testing.T, victim *agent, orphans []string, targets []*target) (killed time.Time, covered time.Duration) {
	t.Helper()
	byAddr := map[string]*target{}
	for _, tg := range targets {
		byAddr[tg.addr] = tg
	}
	victim.kill()
	killed = time.Now()
	eventually(t, convergeTimeout, "every orphaned target scraped again", func() error {
		covered = 0
		for _, inst := range orphans {
			at, ok := byAddr[inst].firstServedAfter(killed)
			if !ok {
				return fmt.Errorf("%s not scraped since the kill %v ago", inst, time.Since(killed).Round(time.Millisecond))
			}
			covered = max(covered, at.Sub(killed))
		}
		return nil
	})
	t.Logf("SIGKILL of %s (%d targets): every target scraped again after %v", victim.spec.name, len(orphans), covered.Round(time.Millisecond))
	return killed, covered
}
