package web

import (
	"encoding/json"
	"net/http"
	"sort"
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
	if h.opts.Scrape == nil {
		return out
	}
	lb := labels.NewBuilder(labels.EmptyLabels())
	sources := h.monitorJobs().Sources
	pools := h.opts.Scrape.TargetsActive()
	names := make([]string, 0, len(pools))
	for p := range pools {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, pool := range names {
		for _, t := range pools[pool] {
			lastErr := ""
			if err := t.LastError(); err != nil {
				lastErr = err.Error()
			}
			out = append(out, activeTarget{
				DiscoveredLabels:   t.DiscoveredLabels(lb),
				Labels:             t.Labels(lb),
				ScrapePool:         pool,
				ScrapeURL:          t.URL().String(),
				GlobalURL:          t.URL().String(),
				LastError:          lastErr,
				LastScrape:         t.LastScrape(),
				LastScrapeDuration: t.LastScrapeDuration().Seconds(),
				Health:             t.Health(),
				ScrapeInterval:     t.GetValue(model.ScrapeIntervalLabel),
				ScrapeTimeout:      t.GetValue(model.ScrapeTimeoutLabel),
				Source:             sources[pool],
			})
		}
	}
	return out
}

func (h *Handler) apiTargets(w http.ResponseWriter, r *http.Request) {
	state := strings.ToLower(r.URL.Query().Get("state"))
	mj := h.monitorJobs()
	td := targetDiscovery{ActiveTargets: []activeTarget{}, DroppedTargets: []droppedTarget{}, DroppedTargetCounts: map[string]int{}, RejectedObjects: mj.Rejected}
	if state == "" || state == "any" || state == "active" {
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
