package main

import (
	"log/slog"
	"sync"
	"time"
)

// joinStart answers whether the targets this node gained on joining the
// ring have started, for /-/ready: a replica is ready once it scrapes
// what it owns. A rolling update starts the next replica only when this
// one is ready, so the ring stays still while its peers hand it its
// targets back; while the ring changes every few seconds, a gained target
// waits for the update bound instead of the hand-off delay.
//
// It latches: later ring changes (other replicas joining or leaving) make
// targets wait too, and a ready replica must not turn unready for them.
// It also latches once bound has passed since the node first asked as a
// participant: the gate starts a held target after --cluster.handoff-timeout
// at most, but a ring that keeps changing can keep some target waiting at
// every ask.
type joinStart struct {
	bound  time.Duration
	logger *slog.Logger // nil: no log line when it latches

	mu    sync.Mutex
	since time.Time // when first asked; zero before
	done  bool
}

// startState is what the node can tell of its gained targets at an ask.
type startState struct {
	// waiting is how many owned targets wait for their hand-off now.
	waiting int
	// placed is whether targets were placed with this node as a
	// participant yet.
	placed bool
	// steppedAside is whether the node stepped aside for a scrape
	// configuration its peers do not share: it owns nothing, so it has
	// nothing to start, and a rolling update that carries the change
	// would otherwise wait for it for good.
	steppedAside bool
}

// started reports whether the targets gained on joining have started.
func (j *joinStart) started(s startState) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.done {
		return true
	}
	now := time.Now()
	if j.since.IsZero() {
		j.since = now
	}
	j.done = s.steppedAside || s.placed && s.waiting == 0 || now.Sub(j.since) >= j.bound
	if j.done && j.logger != nil {
		j.logger.Info("Ready: the targets gained on joining have started", "waiting", s.waiting, "placed", s.placed,
			"stepped_aside", s.steppedAside, "asked_for", now.Sub(j.since))
	}
	return j.done
}
