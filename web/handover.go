package web

import (
	"net/http"

	"github.com/shoal-dev/shoal/handover"
)

// Handover is the backlog hand-over service (*handover.Service): it
// receives transfers from departing peers and reports its transfers.
type Handover interface {
	http.Handler
	Status() handover.Status
}

// PeerClient builds the client and scheme this node uses to reach its
// peers' HTTP servers (the status page fan-out, the backlog hand-over):
// credentials from the client configuration file, https when the web
// configuration turns TLS on.
func PeerClient(webConfigFile, clientConfigFile string) (*http.Client, string, error) {
	return peerClient(Options{WebConfigFile: webConfigFile, PeerClientConfigFile: clientConfigFile})
}

// SamplesPerSecond is this node's appended samples per second over about
// the last 30s, as the status page shows it. It reads no metric (it is
// called while the registry is gathered: shoal_replica_utilization_ratio)
// and is 0 until Run has observed the counter twice.
func (h *Handler) SamplesPerSecond() float64 {
	return h.meter.rate()
}

// handoverStatus is the status page's view of the hand-over; nil without one.
func (h *Handler) handoverStatus() *handover.Status {
	if h.opts.Handover == nil {
		return nil
	}
	st := h.opts.Handover.Status()
	return &st
}
