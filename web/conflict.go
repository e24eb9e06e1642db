package web

import (
	"time"

	"github.com/shoal-dev/shoal/cluster"
)

// conflictReporter is the optional part of Membership that reports node
// name conflicts (*cluster.Node has it).
type conflictReporter interface {
	LastConflict() (cluster.Conflict, bool)
}

// conflictShown is how long a name conflict stays on the pages after
// memberlist last reported it. memberlist reports it again with each gossip
// message of the ignored node, so an ongoing conflict never ages out.
const conflictShown = 5 * time.Minute

// nameConflict is the name conflict to show, or nil.
func (h *Handler) nameConflict(now time.Time) *cluster.Conflict {
	cr, ok := h.opts.Cluster.(conflictReporter)
	if !ok {
		return nil
	}
	c, ok := cr.LastConflict()
	if !ok || now.Sub(c.Time) > conflictShown {
		return nil
	}
	return &c
}
