package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
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
}

// droppedTarget extends Prometheus' dropped entry with why shoal dropped it
// and, when another node owns it, which.
type droppedTarget struct {
	DiscoveredLabels labels.Labels `json:"discoveredLabels"`
	ScrapePool       string        `json:"scrapePool"`
	ScrapeURL        string        `json:"scrapeUrl,omitempty"`
	DropReason       string        `json:"dropReason"`
	Owners           []string      `json:"owners,omitempty"`
}

type targetDiscovery struct {
	ActiveTargets       []activeTarget  `json:"activeTargets"`
	DroppedTargets      []droppedTarget `json:"droppedTargets"`
	DroppedTargetCounts map[string]int  `json:"droppedTargetCounts"`
}

func (h *Handler) activeTargets() []activeTarget {
	out := []activeTarget{}
	if h.opts.Scrape == nil {
		return out
	}
	lb := labels.NewBuilder(labels.EmptyLabels())
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
			})
		}
	}
	return out
}

func (h *Handler) apiTargets(w http.ResponseWriter, r *http.Request) {
	state := strings.ToLower(r.URL.Query().Get("state"))
	td := targetDiscovery{ActiveTargets: []activeTarget{}, DroppedTargets: []droppedTarget{}, DroppedTargetCounts: map[string]int{}}
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
				})
			}
		}
	}
	writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: td})
}

// peerJSON is one entry of /api/v1/cluster/peers (SPEC).
type peerJSON struct {
	Name         string    `json:"name"`
	Address      string    `json:"address"`
	HTTPAddress  string    `json:"httpAddress,omitempty"`
	State        string    `json:"state"`
	Self         bool      `json:"self"`
	OwnedTargets int       `json:"ownedTargets"`
	RingShare    float64   `json:"ringShare"`
	StartTime    time.Time `json:"startTime,omitzero"`
}

type peersJSON struct {
	Self  string     `json:"self"`
	Peers []peerJSON `json:"peers"`
}

func (h *Handler) peers() peersJSON {
	counts := map[string]int{}
	if h.opts.Ownership != nil {
		counts = h.opts.Ownership.OwnedCounts()
	}
	if h.opts.Cluster == nil {
		// Clustering disabled: this node is the whole cluster and owns everything it keeps.
		return peersJSON{Self: h.opts.NodeName, Peers: []peerJSON{{
			Name: h.opts.NodeName, State: "participant", Self: true, OwnedTargets: counts[h.opts.NodeName], RingShare: 1,
		}}}
	}
	r := h.opts.Ring()
	res := peersJSON{Self: h.opts.Cluster.Self().Name, Peers: []peerJSON{}}
	for _, p := range h.opts.Cluster.Peers() {
		share := 0.0
		if r != nil {
			share = r.Share(p.Name)
		}
		res.Peers = append(res.Peers, peerJSON{
			Name:         p.Name,
			Address:      p.Addr,
			HTTPAddress:  p.HTTPAddr,
			State:        p.State.String(),
			Self:         p.Self,
			OwnedTargets: counts[p.Name],
			RingShare:    share,
			StartTime:    p.StartTime,
		})
	}
	return res
}

func (h *Handler) apiPeers(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: h.peers()})
}

// clusterTarget is one entry of /api/v1/cluster/targets: where the ring says
// a target belongs and who really scrapes it, so that a duplicate or an
// orphan shows at once.
type clusterTarget struct {
	Job       string        `json:"job"`
	ScrapeURL string        `json:"scrapeUrl"`
	Labels    labels.Labels `json:"labels"`
	Owners    []string      `json:"owners"`
	ScrapedBy []string      `json:"scrapedBy"`
	Health    string        `json:"health,omitempty"`
	// Status is "ok", "orphan" (nobody scrapes it), "duplicate" (more
	// scrapers than owners), "misplaced" (scraped by a non-owner) or
	// "unknown" (an owner could not be asked).
	Status string `json:"status"`
}

type clusterTargets struct {
	Targets []clusterTarget `json:"targets"`
	// Unreachable lists peers whose targets could not be read; their
	// scrapes are missing from scrapedBy.
	Unreachable []string `json:"unreachable"`
}

type targetRef struct{ job, url string }

type scrapeReport struct {
	health map[targetRef]string
	err    error
}

// peerScrapes asks every peer which targets it scrapes; the local node answers from memory.
func (h *Handler) peerScrapes(ctx context.Context, localTargets []activeTarget) (map[string]scrapeReport, []string) {
	reports := map[string]scrapeReport{}
	local := map[targetRef]string{}
	for _, t := range localTargets {
		local[targetRef{t.ScrapePool, t.ScrapeURL}] = string(t.Health)
	}
	if h.opts.Cluster == nil {
		reports[h.opts.NodeName] = scrapeReport{health: local}
		return reports, nil
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, p := range h.opts.Cluster.Peers() {
		if p.Self {
			mu.Lock()
			reports[p.Name] = scrapeReport{health: local}
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			health, err := h.fetchPeerTargets(ctx, p.HTTPAddr)
			mu.Lock()
			reports[p.Name] = scrapeReport{health: health, err: err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	var unreachable []string
	for name, rep := range reports {
		if rep.err != nil {
			h.logger.Warn("Could not read a peer's targets", "peer", name, "err", rep.err)
			unreachable = append(unreachable, name)
		}
	}
	sort.Strings(unreachable)
	return reports, unreachable
}

func (h *Handler) fetchPeerTargets(ctx context.Context, httpAddr string) (map[targetRef]string, error) {
	if httpAddr == "" {
		return nil, fmt.Errorf("peer advertises no HTTP address")
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.PeerTimeout)
	defer cancel()
	u := &url.URL{Scheme: "http", Host: httpAddr, Path: "/api/v1/targets", RawQuery: "state=active"}
	if strings.Contains(httpAddr, "://") {
		base, err := url.Parse(httpAddr)
		if err != nil {
			return nil, err
		}
		u.Scheme, u.Host = base.Scheme, base.Host
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := h.opts.PeerClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", u, resp.Status)
	}
	var body struct {
		Data struct {
			ActiveTargets []struct {
				ScrapePool string `json:"scrapePool"`
				ScrapeURL  string `json:"scrapeUrl"`
				Health     string `json:"health"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 64<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", u, err)
	}
	out := make(map[targetRef]string, len(body.Data.ActiveTargets))
	for _, t := range body.Data.ActiveTargets {
		out[targetRef{t.ScrapePool, t.ScrapeURL}] = t.Health
	}
	return out, nil
}

// clusterTargets joins the ring's owners with what every node scrapes;
// localTargets are this node's active targets.
func (h *Handler) clusterTargets(ctx context.Context, localTargets []activeTarget) clusterTargets {
	reports, unreachable := h.peerScrapes(ctx, localTargets)
	res := clusterTargets{Targets: []clusterTarget{}, Unreachable: unreachable}
	if res.Unreachable == nil {
		res.Unreachable = []string{}
	}
	if h.opts.Ownership == nil {
		return res
	}
	names := make([]string, 0, len(reports))
	for n := range reports {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, ti := range h.opts.Ownership.Targets() {
		if ti.Labels.IsEmpty() { // relabelled away: nobody should scrape it
			continue
		}
		ref := targetRef{ti.Job, ti.ScrapeURL}
		ct := clusterTarget{Job: ti.Job, ScrapeURL: ti.ScrapeURL, Labels: ti.Labels, Owners: ti.Owners, ScrapedBy: []string{}}
		if ct.Owners == nil {
			ct.Owners = []string{}
		}
		for _, n := range names {
			if health, ok := reports[n].health[ref]; ok {
				ct.ScrapedBy = append(ct.ScrapedBy, n)
				if ct.Health == "" || health != string(promscrape.HealthGood) {
					ct.Health = health
				}
			}
		}
		ct.Status = placementStatus(ct.Owners, ct.ScrapedBy, unreachable)
		res.Targets = append(res.Targets, ct)
	}
	return res
}

func placementStatus(owners, scrapedBy, unreachable []string) string {
	for _, o := range owners {
		// An owner that could not be asked may well be scraping it.
		if slices.Contains(unreachable, o) && !slices.Contains(scrapedBy, o) {
			return "unknown"
		}
	}
	switch {
	case len(scrapedBy) == 0:
		return "orphan"
	case len(scrapedBy) > len(owners):
		return "duplicate"
	}
	for _, s := range scrapedBy {
		if !slices.Contains(owners, s) {
			return "misplaced"
		}
	}
	return "ok"
}

func (h *Handler) apiClusterTargets(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: h.clusterTargets(r.Context(), h.activeTargets())})
}
