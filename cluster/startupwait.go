package cluster

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// A node waits for the cluster it should be part of before it is ready
// (and so before it takes targets) in two cases, unless WaitForSize is set:
// it remembers participants from its last run (see snapshot.go), or it
// remembers nothing and none of the join addresses other than its own
// answered at Start (replicas started together, the seed not listening
// yet). Otherwise it would become the only participant of a new ring and
// scrape every target while its peers scrape theirs. The wait ends at the
// first of:
//
//  1. a participant is seen: the cluster lives on and this node joins it
//     (the hand-off gate then orders the targets it gains);
//  2. with remembered participants, every one of them is seen again, in
//     any state (the whole cluster is restarting together); without, any
//     peer is seen;
//  3. silence: rememberedSilence has passed since Start, no participant
//     answered, and every address waited for that has not answered (the
//     remembered participants' or the join addresses) refused at least
//     rememberedAttempts joins. Nobody this node knew is scraping, so the
//     cluster is gone (a full stop, or peers that are not coming back) or
//     not there yet, and the node starts a new one without stalling;
//  4. WaitTimeout, the bound of every wait.
//
// A node whose join list names only itself (a seed) and that remembers
// nothing bootstraps at once, as before.
const (
	// rememberedSilence is long enough for a peer that is up to answer a
	// join many times over (they answer in milliseconds, even while their
	// WAL replays), and short enough that a cluster restarted with fewer
	// replicas than before scrapes again within seconds.
	rememberedSilence = 10 * time.Second
	// rememberedAttempts makes sure every address was really tried: a join
	// to an address no host answers may take memberlist's TCP timeout
	// (10s) before it fails.
	rememberedAttempts = 2
	// startupRetry is how often the remembered addresses and the join list
	// are tried while the node waits for its cluster.
	startupRetry = time.Second
)

// startupWait is the wait for the cluster a starting node should join.
type startupWait struct {
	// participants maps each remembered participant to its address; empty
	// on a cold start, where addrs are the join addresses that did not
	// answer.
	participants map[string]string
	addrs        []string
	since        time.Time      // Start
	failures     map[string]int // failed joins by address waited for
}

// newStartupWait is the wait for the participants s remembers; nil if none.
func newStartupWait(s snapshot) *startupWait {
	w := &startupWait{participants: map[string]string{}, failures: map[string]int{}}
	for _, m := range s.Members {
		if m.Participant {
			w.participants[m.Name] = m.Addr
			w.addrs = append(w.addrs, m.Addr)
		}
	}
	if len(w.participants) == 0 {
		return nil
	}
	return w
}

// newColdWait is the wait of a node that remembers nothing for the join
// addresses that did not answer at Start.
func newColdWait(addrs []string, since time.Time, failures int) *startupWait {
	w := &startupWait{addrs: addrs, since: since, failures: map[string]int{}}
	for _, a := range addrs {
		w.failures[a] = failures
	}
	return w
}

// decide reports whether the wait is over given the other alive members,
// and why (or, while it goes on, what it waits for).
func (w *startupWait) decide(now time.Time, peers map[string]Peer) (bool, string) {
	names := slices.Sorted(maps.Keys(peers))
	for _, name := range names {
		if peers[name].State == Participant {
			return true, fmt.Sprintf("joined the running cluster (participant %s)", name)
		}
	}
	pending, what := w.addrs, "the join addresses "+strings.Join(w.addrs, ", ")
	if len(w.participants) > 0 {
		var missing []string
		pending = nil
		for _, name := range slices.Sorted(maps.Keys(w.participants)) {
			if _, ok := peers[name]; !ok {
				missing = append(missing, name)
				pending = append(pending, w.participants[name])
			}
		}
		if len(missing) == 0 {
			return true, fmt.Sprintf("all %d remembered participants are back", len(w.participants))
		}
		what = "the remembered participants " + strings.Join(missing, ", ")
	} else if len(names) > 0 {
		return true, fmt.Sprintf("joined peer %s", names[0])
	}
	silent := true
	for _, a := range pending {
		if w.failures[a] < rememberedAttempts {
			silent = false
		}
	}
	waited := now.Sub(w.since)
	if silent && waited >= rememberedSilence {
		return true, fmt.Sprintf("no participant answered within %s and neither did %s: starting a new cluster", rememberedSilence, what)
	}
	return false, fmt.Sprintf("waiting for the cluster this node belongs to: no participant seen, nor %s (a new cluster starts if none answers for %s; at most --cluster.wait-timeout)",
		what, rememberedSilence)
}

// joinFailed counts a failed join to addr if it is an address waited for.
func (w *startupWait) joinFailed(addr string) {
	if slices.Contains(w.addrs, addr) {
		w.failures[addr]++
	}
}

// remember takes in the snapshot read by New: its addresses are joined on
// start and, without an explicit WaitForSize, its participants are waited
// for.
func (n *Node) remember(s snapshot) {
	participants := 0
	for _, m := range s.Members {
		n.remembered = append(n.remembered, m.Addr)
		if m.Participant {
			participants++
		}
	}
	n.metrics.remembered.Set(float64(participants))
	if n.cfg.WaitForSize == 0 {
		n.startup = newStartupWait(s)
	}
	if len(s.Members) > 0 {
		n.logger.Info("Rejoining the cluster remembered from the last run",
			"members", len(s.Members), "participants", participants, "waits_for_them", n.startup != nil,
			"recorded", s.Written.Format(time.RFC3339), "left_gracefully", s.Left)
	}
}

// settleStartupWait runs after Start's first join round: a node that
// remembers nothing, joined nobody and had join addresses besides its own
// waits for them (a cold start); the silence clock starts.
func (n *Node) settleStartupWait(joined int, failed []string) {
	n.mu.Lock()
	n.startSettled = true
	if n.startup == nil && !n.ready && n.cfg.WaitForSize == 0 && joined == 0 && len(failed) > 0 {
		n.startup = newColdWait(failed, time.Now(), 1)
	}
	waiting := n.startup != nil && !n.ready
	if waiting {
		n.silenceTimer = time.AfterFunc(max(rememberedSilence-time.Since(n.startup.since), 0), n.checkReady)
	}
	n.mu.Unlock()
	switch {
	case joined > 0:
	case waiting:
		n.logger.Info("no peer answered yet; waiting for the cluster before taking targets", "retry", startupRetry, "silence", rememberedSilence)
	default:
		n.logger.Info("no peer answered; bootstrapped a cluster of one", "rejoin_interval", n.cfg.RejoinInterval)
	}
}

// waitingForCluster reports whether the node still waits for the cluster
// it remembers.
func (n *Node) waitingForCluster() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.startup != nil && !n.ready
}

func (n *Node) startupJoinFailed(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.startup != nil && !n.ready {
		n.startup.joinFailed(addr)
	}
}

// startupDecideLocked decides the startup wait; without one the node is
// ready. n.mu is held.
func (n *Node) startupDecideLocked() (bool, string) {
	if n.startup == nil {
		return true, "nothing to wait for"
	}
	return n.startup.decide(time.Now(), n.peers)
}

// RememberedWait says what the node waits for before it is ready: the
// cluster it remembers from its last run, or on a cold start its join
// addresses; empty when it does not wait for them (it is ready, or
// WaitForSize is set and decides alone).
func (n *Node) RememberedWait() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ready || n.startup == nil {
		return ""
	}
	_, why := n.startup.decide(time.Now(), n.peers)
	return why
}

// mergeAddrs returns the sorted union of two address lists.
func mergeAddrs(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}
