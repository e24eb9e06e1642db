package discoveryerr

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// client-go's informers (under Prometheus' kubernetes_sd_configs) return no
// errors to their caller: a refused list or watch is only logged, through
// klog, as an error with the reflector's "type" (e.g. "*v1.Pod"); an
// unreachable or throttling API server during the initial streaming list as
// "watch-list failed - backing off" at klog verbosity 2; and a successful
// (re)list as "Caches populated" at verbosity 2. ClientGoHandler reads these
// on their way to the log. Their shapes are client-go's; this package's
// tests and the Kubernetes e2e test fail if a client-go upgrade changes them.
//
// Not seen: an API server lost after the informer synced, while client-go
// re-watches from its last version, is logged only at verbosity 4 and its
// recovery not at all, so recording it would leave an error that never
// clears.
const (
	cachesPopulated = "Caches populated"
	watchListRetry  = "watch-list failed - backing off"
	populatedLevel  = slog.Level(-2) // logr's V(2) through logr.FromSlogHandler
	typeKey         = "type"
	reflectorKey    = "reflector"
	errKey          = "err" // logr's key for the error of Logger.Error
)

// ClientGoHandler wraps next, the handler of shoal's logger, into the handler
// for klog (klog.SetSlogLogger): every record still goes to next when next
// is enabled for its level, and reflector failures and recoveries are
// recorded in rec as Targets errors of method "kubernetes_sd <type>".
//
// Informers of the same type (one per namespace, or per job) share a method:
// a successful list of any of them clears it until the failing one retries
// (client-go retries with a backoff of at most 30s).
func ClientGoHandler(next slog.Handler, rec *Recorder) slog.Handler {
	return &clientGoHandler{next: next, rec: rec}
}

type clientGoHandler struct {
	next  slog.Handler
	rec   *Recorder
	attrs []slog.Attr // from WithAttrs, outside any group
	group bool        // attributes now go into a group: not ours to read
}

func (h *clientGoHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= populatedLevel || h.next.Enabled(ctx, l)
}

func (h *clientGoHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.group {
		h.observe(r)
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *clientGoHandler) observe(r slog.Record) {
	if r.Level < slog.LevelError && r.Message != cachesPopulated && r.Message != watchListRetry {
		return
	}
	var typ, errText string
	var reflector bool
	look := func(a slog.Attr) bool {
		switch a.Key {
		case typeKey:
			typ = a.Value.Resolve().String()
		case reflectorKey:
			reflector = true
		case errKey:
			errText = fmt.Sprint(a.Value.Resolve().Any())
		}
		return true
	}
	for _, a := range h.attrs {
		look(a)
	}
	r.Attrs(look)
	if !reflector || typ == "" {
		return
	}
	method := "kubernetes_sd " + typ
	switch {
	case r.Message == cachesPopulated:
		h.rec.OK(Targets, method)
	case errText != "":
		t := r.Time
		if t.IsZero() {
			t = time.Now()
		}
		h.rec.Fail(Targets, method, r.Message+": "+errText, t)
	}
}

func (h *clientGoHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	if !h.group {
		c.attrs = append(slices.Clip(h.attrs), as...)
	}
	return &c
}

func (h *clientGoHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	c.group = c.group || name != ""
	return &c
}
