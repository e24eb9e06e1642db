// Package discoveryerr keeps the last error of each discovery mechanism, peer
// or target, so the status page and /api/v1/status/node can say why a node
// finds no peers or targets. The log says it too, but scrolls away.
package discoveryerr

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Kinds of discovery.
const (
	Peers   = "peers"   // cluster peer discovery (--cluster.join, Kubernetes pods)
	Targets = "targets" // scrape target discovery (scrape_configs' *_sd_configs)
)

// maxText bounds the error text kept: API errors are a line or two, and a
// page must not grow with whatever a server sends.
const maxText = 1024

// Error is the last failure of one discovery method, current until the
// method next succeeds.
type Error struct {
	Kind   string `json:"kind"`   // Peers or Targets
	Method string `json:"method"` // e.g. "kubernetes", "dns", "kubernetes_sd *v1.Pod"
	Text   string `json:"error"`
	// Time is when it last failed.
	Time time.Time `json:"time"`
	// Count is how many times it failed since it last succeeded.
	Count int `json:"count"`
}

// Recorder holds the current Error of each (kind, method). The zero value is
// ready to use; it is safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	errs map[[2]string]*Error
}

// Fail records a failure of method at t.
func (r *Recorder) Fail(kind, method, text string, t time.Time) {
	if len(text) > maxText {
		text = strings.ToValidUTF8(text[:maxText], "") + "…"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.errs == nil {
		r.errs = map[[2]string]*Error{}
	}
	k := [2]string{kind, method}
	e, ok := r.errs[k]
	if !ok {
		e = &Error{Kind: kind, Method: method}
		r.errs[k] = e
	}
	e.Text, e.Time = text, t
	e.Count++
}

// OK records a success of method: its error, if any, is over.
func (r *Recorder) OK(kind, method string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.errs, [2]string{kind, method})
}

// Errors returns the current errors, ordered by kind and method.
func (r *Recorder) Errors() []Error {
	r.mu.Lock()
	out := make([]Error, 0, len(r.errs))
	for _, e := range r.errs {
		out = append(out, *e)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Error) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
	return out
}
