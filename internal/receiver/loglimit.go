package receiver

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// limitedHandler passes at most perSecond records a second to the wrapped
// handler and drops (and counts) the rest. Prometheus' write handler logs one
// line per rejected sample; under benchmark load a burst of out-of-order
// samples would otherwise turn into a log storm that slows ingestion.
type limitedHandler struct {
	next  slog.Handler
	state *limitState
}

type limitState struct {
	perSecond  int
	mu         sync.Mutex
	window     time.Time
	inWindow   int
	suppressed atomic.Uint64
}

func newLimitedLogger(l *slog.Logger, perSecond int) (*slog.Logger, *limitState) {
	st := &limitState{perSecond: perSecond}
	return slog.New(&limitedHandler{next: l.Handler(), state: st}), st
}

func (h *limitedHandler) Enabled(ctx context.Context, lvl slog.Level) bool {
	return h.next.Enabled(ctx, lvl)
}

func (h *limitedHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.state.allow(r.Time) {
		h.state.suppressed.Add(1)
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *limitedHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &limitedHandler{next: h.next.WithAttrs(as), state: h.state}
}

func (h *limitedHandler) WithGroup(name string) slog.Handler {
	return &limitedHandler{next: h.next.WithGroup(name), state: h.state}
}

func (s *limitState) allow(now time.Time) bool {
	if now.IsZero() {
		now = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.window) >= time.Second || now.Before(s.window) {
		s.window = now
		s.inWindow = 0
	}
	if s.inWindow >= s.perSecond {
		return false
	}
	s.inWindow++
	return true
}
