package sim

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
)

// Members is what a cluster of N in-process members costs and how fast it
// agrees. The members are real cluster.Node values (memberlist with
// shoal's settings and metadata) talking over an in-memory network
// (memNet): no sockets, so a thousand members fit in one process and the
// figures are gossip's own, not the kernel's. The network counts every
// byte memberlist hands it.
//
// Run in a testing/synctest bubble (TestMembersAtScale, which make scale
// runs), the durations are protocol time: every timer of memberlist and
// shoal runs on the bubble's clock, which moves only when every member
// waits, so a thousand members on two cores are measured as if each had a
// core of its own and the network no latency. Outside a bubble they are
// wall-clock time on this machine, and a loaded machine stretches them.
type Members struct {
	N int
	// Join: all N started at once (one after the other, without waiting),
	// from the last one's start until every member lists all N as
	// participants (every ring complete and equal).
	Join time.Duration
	// OneJoin: one more member joining the settled cluster, from its start
	// until every member lists it as a participant.
	OneJoin time.Duration
	// Update: from one member changing its metadata (turning terminating,
	// as on SIGTERM; a fence announcement travels the same way) until every
	// other member sees the change.
	Update time.Duration
	// Leave: from a graceful leave until no member lists the leaver.
	Leave time.Duration
	// Crash: from a member stopping without a word until no member lists it.
	Crash time.Duration
	// BytesPerMember is the gossip sent plus received per member per
	// second once it has settled (settledRate): over a window of Idle that
	// began Settle after the join was agreed. JoinBytesPerMember is the
	// rate over the first window, while the joins' news was still being
	// relayed.
	BytesPerMember     float64
	JoinBytesPerMember float64
	Idle               time.Duration
	Settle             time.Duration
	// RingBuild is the time and memory to build the ring of N members,
	// measured on the wall clock (RingBuild).
	RingBuild      time.Duration
	RingBuildBytes uint64
	Err            string
}

// SimulateMembers runs n members and measures Members. Every wait is
// bounded by timeout. logf reports each phase as it ends: at a thousand
// members the run takes many minutes of wall time.
func SimulateMembers(ctx context.Context, n int, idle, timeout time.Duration, logf func(format string, args ...any)) (m Members) {
	m.N, m.Idle = n, idle
	fail := func(err error) Members { m.Err = err.Error(); return m }
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// memberlist's compression is off and the network counts what it
	// would have sent with it on (wireSize).
	mn := memNet{compress: true}
	// One transport more than n: for the member that joins the settled cluster.
	trs := make([]*memTransport, n+1)
	for i := range trs {
		trs[i] = mn.newTransport()
	}
	logger := slog.New(slog.DiscardHandler)
	nodes := make([]*cluster.Node, n+1)
	// The slice's elements are set below; the deferred call reads them then.
	defer shutdownAll(nodes)
	addr := func(i int) string { return trs[i].addr.String() }
	start := func(i int) error {
		cfg := cluster.DefaultConfig()
		cfg.NodeName = fmt.Sprintf("shoal-%d", i)
		cfg.ListenAddr, cfg.AdvertiseAddr = addr(i), addr(i)
		if i > 0 {
			cfg.Join = []string{addr(0), addr(i / 2)}
		}
		cfg.Memberlist = func(c *memberlist.Config) { c.Transport, c.EnableCompression = trs[i], false }
		nd, err := cluster.New(cfg, logger, nil)
		if err != nil {
			return err
		}
		nodes[i] = nd
		if err := nd.Start(ctx); err != nil {
			return err
		}
		return nd.SetState(cluster.Participant)
	}
	for i := range n {
		if err := start(i); err != nil {
			return fail(err)
		}
	}
	t0 := time.Now()
	if _, err := pollUntil(timeout, "join", agreed(nodes[:n], func(ps []cluster.Peer) bool { return countState(ps, cluster.Participant) == n })); err != nil {
		return fail(err)
	}
	m.Join = time.Since(t0)
	logf("%d members: all agreed on the ring %v after the last started", n, m.Join)

	var err error
	if m.BytesPerMember, m.JoinBytesPerMember, m.Settle, err = settledRate(ctx, &mn, n, idle, timeout, logf); err != nil {
		return fail(err)
	}

	t0 = time.Now()
	if err := start(n); err != nil {
		return fail(err)
	}
	if _, err := pollUntil(timeout, "one join", agreed(nodes, func(ps []cluster.Peer) bool { return countState(ps, cluster.Participant) == n+1 })); err != nil {
		return fail(err)
	}
	m.OneJoin = time.Since(t0)
	logf("%d members: one more joined in %v", n, m.OneJoin)

	leaver := nodes[n]
	others := nodes[:n]
	name0 := leaver.Self().Name
	t0 = time.Now()
	_ = leaver.SetState(cluster.Terminating)
	if _, err := pollUntil(timeout, "update", agreed(others, func(ps []cluster.Peer) bool { return stateOf(ps, name0) == cluster.Terminating })); err != nil {
		return fail(err)
	}
	m.Update = time.Since(t0)
	logf("%d members: an update seen by all in %v", n, m.Update)
	t0 = time.Now()
	_ = leaver.Leave(5 * time.Second)
	_ = leaver.Shutdown()
	nodes[n] = nil
	if _, err := pollUntil(timeout, "leave", agreed(others, func(ps []cluster.Peer) bool { return !has(ps, name0) })); err != nil {
		return fail(err)
	}
	m.Leave = time.Since(t0)
	logf("%d members: a graceful leave seen by all in %v", n, m.Leave)

	crashed := others[len(others)-1]
	name := crashed.Self().Name
	survivors := others[:len(others)-1]
	t0 = time.Now()
	_ = crashed.Shutdown()
	nodes[n-1] = nil
	if _, err := pollUntil(timeout, "crash", agreed(survivors, func(ps []cluster.Peer) bool { return !has(ps, name) })); err != nil {
		return fail(err)
	}
	m.Crash = time.Since(t0)
	logf("%d members: a crash seen by all in %v", n, m.Crash)
	return m
}

// stateOf is the state name has in ps, Viewer when it is not listed.
func stateOf(ps []cluster.Peer, name string) cluster.State {
	for _, p := range ps {
		if p.Name == name {
			return p.State
		}
	}
	return cluster.Viewer
}

// settledRate measures the gossip per member per second (both directions)
// over windows of w until the rate has settled: a window's rate is at most
// half the first window's, or at most settledFloor, and falls by less than
// a tenth from the window before. It returns that rate, the first window's
// and when the settled window began. After a cold start every member relays the news of every
// join, and of every member's first metadata, RetransmitMult ×
// ⌈log10(N+1)⌉ times. While that lasts the rate is flat at what the gossip
// rounds can carry (at a thousand members for minutes), so a flat rate
// alone is not a settled one.
func settledRate(ctx context.Context, mn *memNet, n int, w, timeout time.Duration, logf func(string, ...any)) (settled, first float64, settle time.Duration, err error) {
	// settledFloor is a rate that is settled whatever came before: the
	// probes and the state exchange alone (0.5–0.8 KB/s per member from 12
	// to 1,000 members). A small cluster can finish relaying the news of
	// the joins before its last member agrees on the ring, so that its
	// first window is no longer twice the settled rate (seen once at 12
	// members under -race: 0.8 then 0.5 KB/s).
	const settledFloor = 1000
	start := time.Now()
	prev := -1.0
	for {
		b0, t0 := mn.bytes.Load(), time.Now()
		select {
		case <-ctx.Done():
			return 0, 0, 0, ctx.Err()
		case <-time.After(w):
		}
		r := 2 * float64(mn.bytes.Load()-b0) / time.Since(t0).Seconds() / float64(n)
		logf("%d members: gossip %.1f KB/s per member in the window from %v after the join", n, r/1000, t0.Sub(start))
		if prev < 0 {
			first = r
		} else if r >= 0.9*prev && (r <= first/2 || r <= settledFloor) {
			return r, first, t0.Sub(start), nil
		}
		prev = r
		if time.Since(start) > timeout {
			return 0, first, 0, fmt.Errorf("idle: gossip not settled %v after the join (%.1f KB/s per member, %.1f KB/s at first)", timeout, r/1000, first/1000)
		}
	}
}

// RingBuild times building the ring of n members with the default tokens
// and the memory it allocates (median of 5 builds), on the wall clock.
func RingBuild(n int) (time.Duration, uint64) {
	names := NodeNames(n)
	var ds []time.Duration
	var alloc uint64
	for range 5 {
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		t0 := time.Now()
		r := ring.New(names, 0)
		ds = append(ds, time.Since(t0))
		runtime.ReadMemStats(&b)
		alloc = b.TotalAlloc - a.TotalAlloc
		runtime.KeepAlive(r)
	}
	for i := range ds {
		for j := i + 1; j < len(ds); j++ {
			if ds[j] < ds[i] {
				ds[i], ds[j] = ds[j], ds[i]
			}
		}
	}
	return ds[len(ds)/2], alloc
}

// MembersReport renders SimulateMembers results as Markdown.
func MembersReport(ms []Members) string {
	var b strings.Builder
	b.WriteString("| members | ring agreed, all started at once | one more joining the settled cluster | one update seen by all | graceful leave seen by all | crash seen by all | gossip per member (in+out), settled | right after the joins | settled after | ring build | ring memory |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range ms {
		if m.Err != "" {
			fmt.Fprintf(&b, "| %d | error: %s | | | | | | | | %v | %.1f MiB |\n", m.N, m.Err, m.RingBuild.Round(time.Microsecond), float64(m.RingBuildBytes)/(1<<20))
			continue
		}
		fmt.Fprintf(&b, "| %d | %v | %v | %v | %v | %v | %.1f KB/s | %.1f KB/s | %v | %v | %.1f MiB |\n", m.N, round(m.Join), round(m.OneJoin), round(m.Update), round(m.Leave), round(m.Crash),
			m.BytesPerMember/1000, m.JoinBytesPerMember/1000, round(m.Settle), m.RingBuild.Round(time.Microsecond), float64(m.RingBuildBytes)/(1<<20))
	}
	return b.String()
}
