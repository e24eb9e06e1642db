package web

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"
)

// apiResponse is Prometheus' API envelope.
type apiResponse struct {
	Status    string `json:"status"`
	Data      any    `json:"data,omitempty"`
	ErrorType string `json:"errorType,omitempty"`
	Error     string `json:"error,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// activeTarget has the fields of Prometheus' /api/v1/targets active entries.
type activeTarget struct {
	DiscoveredLabels   labels.Labels           `json:"discoveredLabels"`
	Labels             labels.Labels           `json:"labels"`
	ScrapePool         string                  `json:"scrapePool"`
	ScrapeURL          string                  `json:"scrapeUrl"`
	GlobalURL          string                  `json:"globalUrl"`
	LastError          string                  `json:"lastError"`
	LastScrape         time.Time               `json:"lastScrape"`
	LastScrapeDuration float64                 `json:"lastScrapeDuration"`
	Health             promscrape.TargetHealth `json:"health"`
	ScrapeInterval     string                  `json:"scrapeInterval"`
	ScrapeTimeout      string                  `json:"scrapeTimeout"`
	// Source is the Kubernetes object the job was generated from
	// (--kubernetes.monitors), e.g. "ServiceMonitor apps/web".
	Source string `json:"source,omitempty"`
}

// droppedTarget extends Prometheus' dropped entry with why shoal dropped it
// and, when another node owns it, which.
type droppedTarget struct {
	DiscoveredLabels labels.Labels `json:"discoveredLabels"`
	ScrapePool       string        `json:"scrapePool"`
	ScrapeURL        string        `json:"scrapeUrl,omitempty"`
	DropReason       string        `json:"dropReason"`
	Owners           []string      `json:"owners,omitempty"`
	Source           string        `json:"source,omitempty"`
}

type targetDiscovery struct {
	ActiveTargets       []activeTarget  `json:"activeTargets"`
	DroppedTargets      []droppedTarget `json:"droppedTargets"`
	DroppedTargetCounts map[string]int  `json:"droppedTargetCounts"`
	// RejectedObjects are monitor objects that produced no job, with why.
	RejectedObjects []RejectedObject `json:"rejectedObjects,omitempty"`
}

func (h *Handler) activeTargets() []activeTarget {
	out := []activeTarget{}
	lb := labels.NewBuilder(labels.EmptyLabels())
	sources := h.monitorJobs().Sources
	h.eachActive(func(pool string, t *promscrape.Target) {
		out = append(out, activeTarget{
			DiscoveredLabels:   t.DiscoveredLabels(lb),
			Labels:             t.Labels(lb),
			ScrapePool:         pool,
			ScrapeURL:          t.URL().String(),
			GlobalURL:          t.URL().String(),
			LastError:          lastError(t),
			LastScrape:         t.LastScrape(),
			LastScrapeDuration: t.LastScrapeDuration().Seconds(),
			Health:             t.Health(),
			ScrapeInterval:     t.GetValue(model.ScrapeIntervalLabel),
			ScrapeTimeout:      t.GetValue(model.ScrapeTimeoutLabel),
			Source:             sources[pool],
		})
	})
	return out
}

// scrapeStates are the active targets' scrape states alone, what the
// cluster views ask peers for (fieldsScrape): no labels to build, encode
// and decode, about a third of the bytes of activeTargets.
func (h *Handler) scrapeStates() []scrapeState {
	out := []scrapeState{}
	h.eachActive(func(pool string, t *promscrape.Target) {
		out = append(out, scrapeState{ScrapePool: pool, ScrapeURL: t.URL().String(), scrapeDetail: scrapeDetail{
			Health:             string(t.Health()),
			LastScrape:         t.LastScrape(),
			LastError:          lastError(t),
			LastScrapeDuration: t.LastScrapeDuration().Seconds(),
		}})
	})
	return out
}

// eachActive calls fn with every active target, pools in name order.
func (h *Handler) eachActive(fn func(pool string, t *promscrape.Target)) {
	if h.opts.Scrape == nil {
		return
	}
	pools := h.opts.Scrape.TargetsActive()
	for _, pool := range slices.Sorted(maps.Keys(pools)) {
		for _, t := range pools[pool] {
			fn(pool, t)
		}
	}
}

func lastError(t *promscrape.Target) string {
	if err := t.LastError(); err != nil {
		return err.Error()
	}
	return ""
}

// fieldsScrape, as /api/v1/targets?fields=scrape (shoal's own parameter),
// asks for the active targets' scrape states alone (scrapeState): the
// cluster views ask every peer for them, and a peer of a version that does
// not know the parameter answers the full entries, which decode the same.
const fieldsScrape = "scrape"

func (h *Handler) apiTargets(w http.ResponseWriter, r *http.Request) {
	state := strings.ToLower(r.URL.Query().Get("state"))
	active := state == "" || state == "any" || state == "active"
	if r.URL.Query().Get("fields") == fieldsScrape {
		states := []scrapeState{}
		if active {
			states = h.scrapeStates()
		}
		writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: struct {
			ActiveTargets []scrapeState `json:"activeTargets"`
		}{states}})
		return
	}
	mj := h.monitorJobs()
	td := targetDiscovery{ActiveTargets: []activeTarget{}, DroppedTargets: []droppedTarget{}, DroppedTargetCounts: map[string]int{}, RejectedObjects: mj.Rejected}
	if active {
		td.ActiveTargets = h.activeTargets()
	}
	if h.opts.Ownership != nil {
		for _, ti := range h.opts.Ownership.Targets() {
			if ti.Owned {
				continue
			}
			td.DroppedTargetCounts[ti.Job]++
			if state == "" || state == "any" || state == "dropped" {
				td.DroppedTargets = append(td.DroppedTargets, droppedTarget{
					DiscoveredLabels: ti.DiscoveredLabels,
					ScrapePool:       ti.Job,
					ScrapeURL:        ti.ScrapeURL,
					DropReason:       ti.DropReason,
					Owners:           ti.Owners,
					Source:           mj.Sources[ti.Job],
				})
			}
		}
	}
	writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: td})
}
