package sim

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/shoal-dev/shoal/cluster"
)

// Gossip is how long membership news takes to reach every node of an
// in-process cluster on loopback with the memberlist settings shoal runs
// with (cluster.DefaultConfig).
type Gossip struct {
	Nodes int
	// Join: from starting N-1 nodes that all join node 0 until every node
	// sees all N members.
	Join time.Duration
	// Participants: from every node turning participant at once until every
	// node sees N participants (the ring is then complete everywhere).
	Participants time.Duration
	// StateChange: one node changes state (participant to terminating, as on
	// SIGTERM) until every other node sees it: peers drop it from the ring.
	StateChange time.Duration
	// Leave: a graceful leave until no other node lists the leaver.
	Leave time.Duration
	// Crash: a node stops without leaving until every other node has
	// declared it dead (memberlist's failure detection).
	Crash time.Duration
}

// pollUntil polls cond until it holds or timeout passes, and returns the
// time it took. It waits 5ms between polls, or twice what the last poll
// took when that is longer: asking a thousand members for their peers
// takes a while, and the poller must not take the CPU the members need.
func pollUntil(timeout time.Duration, what string, cond func() bool) (time.Duration, error) {
	start := time.Now()
	for {
		t0 := time.Now()
		if cond() {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("%s: not converged after %v", what, timeout)
		}
		time.Sleep(max(5*time.Millisecond, 2*time.Since(t0)))
	}
}

// agreed returns a condition for pollUntil: every node's peer list
// satisfies pred at the same moment. Each poll it checks, in order, only
// the nodes not yet seen to satisfy pred, up to the first that does not;
// once all have, it checks every node again, and answers true only if all
// still do. So it answers exactly as checking every node at every poll
// would, but a poll costs one failing check instead of up to every
// member's sorted peer list: at a thousand members that was most of the
// simulation's CPU.
func agreed[N interface{ Peers() []cluster.Peer }](nodes []N, pred func([]cluster.Peer) bool) func() bool {
	next := 0 // nodes[:next] were seen satisfying pred
	return func() bool {
		for ; next < len(nodes); next++ {
			if !pred(nodes[next].Peers()) {
				return false
			}
		}
		for i, n := range nodes {
			if !pred(n.Peers()) {
				next = i
				return false
			}
		}
		return true
	}
}

func countState(ps []cluster.Peer, s cluster.State) int {
	c := 0
	for _, p := range ps {
		if p.State == s {
			c++
		}
	}
	return c
}

func has(ps []cluster.Peer, name string) bool {
	for _, p := range ps {
		if p.Name == name {
			return true
		}
	}
	return false
}

// GossipConvergence runs one cluster of n nodes on 127.0.0.1 and measures
// the Gossip timings. Every wait is bounded by timeout.
func GossipConvergence(ctx context.Context, n int, timeout time.Duration) (Gossip, error) {
	g := Gossip{Nodes: n}
	if n < 3 {
		return g, fmt.Errorf("need at least 3 nodes, got %d", n)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	logger := slog.New(slog.DiscardHandler)
	nodes := make([]*cluster.Node, n)
	// The slice's elements are set below; the deferred call reads them then.
	defer shutdownAll(nodes)
	newNode := func(i int, join []string) (*cluster.Node, error) {
		cfg := cluster.DefaultConfig()
		cfg.NodeName = fmt.Sprintf("shoal-%d", i)
		cfg.ListenAddr = "127.0.0.1:0"
		cfg.Join = join
		return cluster.New(cfg, logger, nil)
	}
	var err error
	if nodes[0], err = newNode(0, nil); err != nil {
		return g, err
	}
	if err := nodes[0].Start(ctx); err != nil {
		return g, err
	}
	seed := []string{nodes[0].Self().Addr}

	start := time.Now()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Go(func() {
			nd, err := newNode(i, seed)
			if err == nil {
				nodes[i] = nd
				err = nd.Start(ctx)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return g, err
	}
	if _, err := pollUntil(timeout, "join", agreed(nodes, func(ps []cluster.Peer) bool { return len(ps) == n })); err != nil {
		return g, err
	}
	g.Join = time.Since(start)

	start = time.Now()
	for _, nd := range nodes {
		wg.Go(func() { _ = nd.SetState(cluster.Participant) })
	}
	if _, err := pollUntil(timeout, "participants", agreed(nodes, func(ps []cluster.Peer) bool { return countState(ps, cluster.Participant) == n })); err != nil {
		return g, err
	}
	g.Participants = time.Since(start)
	wg.Wait()

	// One node turns terminating and then leaves gracefully.
	leaver := nodes[n-1]
	others := nodes[:n-1]
	start = time.Now()
	wg.Go(func() { _ = leaver.SetState(cluster.Terminating) })
	if g.StateChange, err = pollUntil(timeout, "state change", agreed(others, func(ps []cluster.Peer) bool { return countState(ps, cluster.Terminating) == 1 })); err != nil {
		return g, err
	}
	wg.Wait()
	start = time.Now()
	if err := leaver.Leave(5 * time.Second); err != nil {
		return g, err
	}
	_ = leaver.Shutdown()
	if _, err := pollUntil(timeout, "leave", agreed(others, func(ps []cluster.Peer) bool { return !has(ps, "shoal-"+fmt.Sprint(n-1)) })); err != nil {
		return g, err
	}
	g.Leave = time.Since(start)

	// Another node crashes: no leave message, failure detection finds it.
	crashed := others[len(others)-1]
	crashedName := crashed.Self().Name
	survivors := others[:len(others)-1]
	_ = crashed.Shutdown()
	if g.Crash, err = pollUntil(timeout, "crash detection", agreed(survivors, func(ps []cluster.Peer) bool { return !has(ps, crashedName) })); err != nil {
		return g, err
	}
	return g, nil
}

// GossipReport runs GossipConvergence rounds times for each size and
// returns Markdown with the median and the worst round of each timing:
// gossip is randomised, and one lost message shows only in the worst case.
func GossipReport(ctx context.Context, sizes []int, rounds int, timeout time.Duration) (string, error) {
	rounds = max(rounds, 1)
	var b []byte
	b = fmt.Appendf(b, "In-process nodes of package `cluster` on 127.0.0.1 with exactly the memberlist settings shoal runs with (`cluster.DefaultConfig()`: memberlist's LAN profile as tuned by package `cluster`). "+
		"Times are from the event until **every** node has seen it; each cell is the median of %d rounds, the worst in parentheses.\n\n", rounds)
	b = append(b, "| nodes | join (N-1 nodes join one seed) | all turn participant | one node terminating | graceful leave | crash detected |\n|---:|---:|---:|---:|---:|---:|\n"...)
	for _, n := range sizes {
		var gs []Gossip
		for range rounds {
			g, err := GossipConvergence(ctx, n, timeout)
			if err != nil {
				return string(b), fmt.Errorf("%d nodes: %w", n, err)
			}
			gs = append(gs, g)
		}
		col := func(f func(Gossip) time.Duration) string {
			ds := make([]time.Duration, len(gs))
			for i, g := range gs {
				ds[i] = f(g)
			}
			slices.Sort(ds)
			return round(ds[(len(ds)-1)/2]) + " (" + round(ds[len(ds)-1]) + ")"
		}
		b = fmt.Appendf(b, "| %d | %s | %s | %s | %s | %s |\n", n,
			col(func(g Gossip) time.Duration { return g.Join }),
			col(func(g Gossip) time.Duration { return g.Participants }),
			col(func(g Gossip) time.Duration { return g.StateChange }),
			col(func(g Gossip) time.Duration { return g.Leave }),
			col(func(g Gossip) time.Duration { return g.Crash }))
	}
	return string(b), nil
}

func round(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

// shutdownAll shuts the started nodes down in parallel (nil: not started,
// or already stopped).
func shutdownAll(nodes []*cluster.Node) {
	var wg sync.WaitGroup
	for _, nd := range nodes {
		if nd != nil {
			wg.Go(func() { _ = nd.Shutdown() })
		}
	}
	wg.Wait()
}
