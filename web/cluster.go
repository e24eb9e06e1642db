package web

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/discoveryerr"
)

// PlacementInfo is the placement in force (--cluster.placement) as this
// node computes it.
type PlacementInfo struct {
	Mode string
	// Loads is the published weight (samples/s) placed on each node, and
	// Limit what every node is held to, with bounded-load placement; nil
	// and 0 with the plain ring.
	Loads map[string]float64
	Limit float64
	// WeighedRate is this node's own measured samples/s of the targets it
	// scrapes as primary: what its published weights are made of.
	WeighedRate float64
}

// ScrapeConfigStatus is the scrape configuration agreement as this node
// sees it (docs/operations.md#configuration-rollouts): ids are short hexadecimal digests.
type ScrapeConfigStatus struct {
	// Current is the configuration this node runs; Previous the one it
	// keeps to place targets by until every participant runs Current.
	Current  string `json:"current"`
	Previous string `json:"previous,omitempty"`
	// PlacingBy is the configuration the cluster places targets by, and
	// Rule how it was chosen: unanimous, common, majority or own.
	PlacingBy string `json:"placingBy"`
	Rule      string `json:"rule"`
	// SteppedAside: this node runs neither and owns nothing.
	SteppedAside bool `json:"steppedAside"`
	// Drift lists the live peers that run another configuration; the
	// node status carries it as configDrift.
	Drift []string `json:"-"`
}

// NodeStatus is the answer of /api/v1/status/node: what this node is and
// the load it carries. Peers fetch it from each other for the cluster views.
type NodeStatus struct {
	Name           string    `json:"name"`
	State          string    `json:"state"`
	Version        string    `json:"version"`
	StartTime      time.Time `json:"startTime"`
	Ready          bool      `json:"ready"`
	NotReadyReason string    `json:"notReadyReason,omitempty"`
	// ScrapedTargets is how many targets this node scrapes now.
	ScrapedTargets int `json:"scrapedTargets"`
	// DiscoveryErrors are the discovery methods failing now, if any.
	DiscoveryErrors []discoveryerr.Error `json:"discoveryErrors,omitempty"`
	// RejectedObjects are the monitor objects that produced no job.
	RejectedObjects []RejectedObject `json:"rejectedObjects,omitempty"`
	// WeighedSamplesPerSecond is, with bounded-load placement, this node's
	// measured samples/s of the targets it scrapes as primary.
	WeighedSamplesPerSecond float64 `json:"weighedSamplesPerSecond,omitempty"`
	// GossipEncryption is how this node protects its gossip: none, key
	// (the shared AES key), tls, or tls+key; empty without clustering.
	GossipEncryption string `json:"gossipEncryption,omitempty"`
	// ConfigDrift lists the live peers that run another scrape
	// configuration than this node; ScrapeConfig is the agreement.
	ConfigDrift  []string            `json:"configDrift,omitempty"`
	ScrapeConfig *ScrapeConfigStatus `json:"scrapeConfig,omitempty"`
	load
}

// encryptionReporter is the optional part of Membership that says how
// gossip is protected (*cluster.Node has it).
type encryptionReporter interface {
	Encryption() string
}

func (h *Handler) nodeStatus() NodeStatus {
	ready, why := h.opts.Ready()
	st := NodeStatus{
		Name:           h.opts.NodeName,
		State:          "participant",
		Version:        h.opts.Version,
		StartTime:      h.start,
		Ready:          ready,
		NotReadyReason: why,
		ScrapedTargets: len(h.activeTargets()),
		load:           h.meter.readCached(time.Now()),
	}
	if h.opts.DiscoveryErrors != nil {
		st.DiscoveryErrors = h.opts.DiscoveryErrors()
	}
	st.RejectedObjects = h.monitorJobs().Rejected
	if h.opts.ScrapeConfig != nil {
		sc := h.opts.ScrapeConfig()
		st.ScrapeConfig, st.ConfigDrift = &sc, sc.Drift
	}
	if h.opts.Placement != nil {
		st.WeighedSamplesPerSecond = h.opts.Placement().WeighedRate
	}
	if h.opts.Cluster != nil {
		self := h.opts.Cluster.Self()
		st.Name, st.State = self.Name, self.State.String()
		if er, ok := h.opts.Cluster.(encryptionReporter); ok {
			st.GossipEncryption = er.Encryption()
		}
	}
	return st
}

func (h *Handler) apiNodeStatus(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: h.nodeStatus()})
}

// PeerStatus is one entry of /api/v1/cluster/peers. The first fields are
// SPEC's; the load figures come from asking the peer, and are zero with
// Error set when it could not be asked.
type PeerStatus struct {
	Name         string    `json:"name"`
	Address      string    `json:"address"`
	HTTPAddress  string    `json:"httpAddress,omitempty"`
	State        string    `json:"state"`
	Self         bool      `json:"self"`
	OwnedTargets int       `json:"ownedTargets"`
	RingShare    float64   `json:"ringShare"`
	StartTime    time.Time `json:"startTime,omitzero"`
	// Placement is --cluster.placement as this node runs it; with
	// "bounded", PlacementLoad is the published weight (samples/s) the
	// placement puts on the peer and PlacementLimit what every node is held
	// to (1.10 × the mean).
	Placement      string  `json:"placement,omitempty"`
	PlacementLoad  float64 `json:"placementLoad,omitempty"`
	PlacementLimit float64 `json:"placementLimit,omitempty"`
	// WeighedSamplesPerSecond is the peer's measured samples/s of the
	// targets it scrapes as primary (bounded placement; from the peer).
	WeighedSamplesPerSecond float64 `json:"weighedSamplesPerSecond,omitempty"`

	Series           int64       `json:"series"`
	SamplesPerSecond float64     `json:"samplesPerSecond"`
	WALBytes         int64       `json:"walBytes"`
	ScrapedTargets   int         `json:"scrapedTargets"`
	RemoteWrite      []QueueLoad `json:"remoteWrite,omitempty"`
	Ready            bool        `json:"ready"`
	NotReadyReason   string      `json:"notReadyReason,omitempty"`
	Version          string      `json:"version,omitempty"`
	// LastHeard is when this node last got an answer from the peer's HTTP API.
	LastHeard time.Time `json:"lastHeard,omitzero"`
	// Error says why the peer could not be asked; its load figures are unknown then.
	Error string `json:"error,omitempty"`
}

// Spread is how unevenly a figure is spread across the nodes that answered.
type Spread struct {
	Max     float64 `json:"max"`
	Mean    float64 `json:"mean"`
	MaxNode string  `json:"maxNode"`
}

// Ratio is max/mean: 1 is perfectly even.
func (s Spread) Ratio() float64 {
	if s.Mean == 0 {
		return 0
	}
	return s.Max / s.Mean
}

// LoadSpread is the spread of each load figure across participants.
type LoadSpread struct {
	Series           Spread `json:"series"`
	SamplesPerSecond Spread `json:"samplesPerSecond"`
	OwnedTargets     Spread `json:"ownedTargets"`
}

// PeersData is the data of /api/v1/cluster/peers.
type PeersData struct {
	Self   string       `json:"self"`
	Peers  []PeerStatus `json:"peers"`
	Spread LoadSpread   `json:"spread"`
	// PeerErrors lists the peers that could not be asked, with the reason.
	PeerErrors []PeerError `json:"peerErrors"`
}

func (h *Handler) peers(ctx context.Context) PeersData {
	counts := map[string]int{}
	if h.opts.Ownership != nil {
		counts = h.opts.Ownership.OwnedCounts()
	}
	self := h.nodeStatus()
	fromStatus := func(p *PeerStatus, st NodeStatus) {
		p.Series, p.SamplesPerSecond, p.WALBytes = st.Series, st.SamplesPerSecond, st.WALBytes
		p.ScrapedTargets, p.RemoteWrite = st.ScrapedTargets, st.RemoteWrite
		p.Ready, p.NotReadyReason, p.Version = st.Ready, st.NotReadyReason, st.Version
		p.WeighedSamplesPerSecond = st.WeighedSamplesPerSecond
	}
	if h.opts.Cluster == nil {
		// Clustering disabled: this node is the whole cluster and owns everything it keeps.
		p := PeerStatus{Name: h.opts.NodeName, State: "participant", Self: true, OwnedTargets: counts[h.opts.NodeName], RingShare: 1, StartTime: h.start, LastHeard: time.Now()}
		fromStatus(&p, self)
		res := PeersData{Self: h.opts.NodeName, Peers: []PeerStatus{p}, PeerErrors: []PeerError{}}
		res.Spread = spreadOf(res.Peers)
		return res
	}
	var (
		mu       sync.Mutex
		statuses = map[string]NodeStatus{}
	)
	errs := h.fanOut(ctx, "node status", func(ctx context.Context, p cluster.Peer) error {
		var st NodeStatus
		if err := h.getPeer(ctx, p, "/api/v1/status/node", "", &st); err != nil {
			return err
		}
		mu.Lock()
		statuses[p.Name] = st
		mu.Unlock()
		return nil
	})
	failed := map[string]string{}
	for _, e := range errs {
		failed[e.Name] = e.Error
	}
	r := h.opts.Ring()
	var pl PlacementInfo
	if h.opts.Placement != nil {
		pl = h.opts.Placement()
	}
	res := PeersData{Self: h.opts.Cluster.Self().Name, Peers: []PeerStatus{}, PeerErrors: errs}
	for _, p := range h.opts.Cluster.Peers() {
		ps := PeerStatus{
			Name:         p.Name,
			Address:      p.Addr,
			HTTPAddress:  p.HTTPAddr,
			State:        p.State.String(),
			Self:         p.Self,
			OwnedTargets: counts[p.Name],
			RingShare:    r.Share(p.Name),
			StartTime:    p.StartTime,
			LastHeard:    h.lastHeardFrom(p.Name),
			Error:        failed[p.Name],
			Placement:    pl.Mode,
		}
		if pl.Loads != nil {
			ps.PlacementLoad, ps.PlacementLimit = pl.Loads[p.Name], pl.Limit
		}
		switch {
		case p.Self:
			ps.LastHeard = time.Now()
			fromStatus(&ps, self)
		case ps.Error == "":
			fromStatus(&ps, statuses[p.Name])
		}
		res.Peers = append(res.Peers, ps)
	}
	res.Spread = spreadOf(res.Peers)
	return res
}

// spreadOf computes max and mean over the participants that answered.
func spreadOf(peers []PeerStatus) LoadSpread {
	var s LoadSpread
	n := 0
	add := func(sp *Spread, v float64, name string) {
		sp.Mean += v
		if v > sp.Max || sp.MaxNode == "" {
			sp.Max, sp.MaxNode = v, name
		}
	}
	for _, p := range peers {
		if p.State != cluster.Participant.String() || p.Error != "" {
			continue
		}
		n++
		add(&s.Series, float64(p.Series), p.Name)
		add(&s.SamplesPerSecond, p.SamplesPerSecond, p.Name)
		add(&s.OwnedTargets, float64(p.OwnedTargets), p.Name)
	}
	if n > 0 {
		for _, sp := range []*Spread{&s.Series, &s.SamplesPerSecond, &s.OwnedTargets} {
			sp.Mean /= float64(n)
		}
	}
	return s
}

func (h *Handler) apiPeers(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: h.peers(r.Context())})
}

// Placement statuses of a target, worst first: the order problems are listed in.
const (
	StatusOrphan    = "orphan"    // nobody scrapes it
	StatusDuplicate = "duplicate" // more scrapers than owners
	StatusMisplaced = "misplaced" // scraped by a node that does not own it
	StatusUnknown   = "unknown"   // an owner could not be asked
	StatusOK        = "ok"
)

// Statuses lists the placement statuses, worst first.
var Statuses = []string{StatusOrphan, StatusDuplicate, StatusMisplaced, StatusUnknown, StatusOK}

func statusRank(s string) int {
	if i := slices.Index(Statuses, s); i >= 0 {
		return i
	}
	return len(Statuses)
}

// ClusterTarget is one entry of /api/v1/cluster/targets: where the ring says
// a target belongs and who really scrapes it, so that a duplicate or an
// orphan shows at once.
type ClusterTarget struct {
	Job       string        `json:"job"`
	ScrapeURL string        `json:"scrapeUrl"`
	Labels    labels.Labels `json:"labels"`
	Owners    []string      `json:"owners"`
	ScrapedBy []string      `json:"scrapedBy"`
	Health    string        `json:"health,omitempty"`
	// Status is one of Statuses.
	Status string `json:"status"`
	// Key is the target's ring key, in hex.
	Key string `json:"key"`
	// LastScrape and LastError are those of the scrape that went worst.
	LastScrape time.Time `json:"lastScrape,omitzero"`
	LastError  string    `json:"lastError,omitempty"`
}

// JobSummary counts one job's targets by placement status.
type JobSummary struct {
	Job     string `json:"job"`
	Targets int    `json:"targets"`
	// OK are the targets scraped by exactly their owners.
	OK       int            `json:"ok"`
	Problems int            `json:"problems"`
	ByStatus map[string]int `json:"byStatus"`
}

// ClusterTargets is the data of /api/v1/cluster/targets. Jobs and Counts
// cover every target; Targets only those that pass the filters, problems
// first.
type ClusterTargets struct {
	Targets []ClusterTarget `json:"targets"`
	// Unreachable lists peers whose targets could not be read; their
	// scrapes are missing from scrapedBy. PeerErrors says why.
	Unreachable []string       `json:"unreachable"`
	PeerErrors  []PeerError    `json:"peerErrors"`
	Jobs        []JobSummary   `json:"jobs"`
	Counts      map[string]int `json:"counts"`
	Total       int            `json:"total"`
	// Matched counts the targets that pass the filters; Targets holds the
	// first limit of them when the request sets one.
	Matched int `json:"matched"`
}

type targetRef struct{ job, url string }

// scrapeDetail is what one node reports about a target it scrapes.
type scrapeDetail struct {
	Health             string    `json:"health"`
	LastScrape         time.Time `json:"lastScrape"`
	LastError          string    `json:"lastError"`
	LastScrapeDuration float64   `json:"lastScrapeDuration"`
}

// scrapeState is an active target's pool, URL and scrape state: an entry
// of /api/v1/targets?fields=scrape, and the part of a full entry the
// cluster views read.
type scrapeState struct {
	ScrapePool string `json:"scrapePool"`
	ScrapeURL  string `json:"scrapeUrl"`
	scrapeDetail
}

// peerScrapes asks every peer which targets it scrapes; this node answers from memory.
func (h *Handler) peerScrapes(ctx context.Context, localTargets []activeTarget) (map[string]map[targetRef]scrapeDetail, []PeerError) {
	reports := map[string]map[targetRef]scrapeDetail{}
	local := map[targetRef]scrapeDetail{}
	for _, t := range localTargets {
		local[targetRef{t.ScrapePool, t.ScrapeURL}] = scrapeDetail{string(t.Health), t.LastScrape, t.LastError, t.LastScrapeDuration}
	}
	self := h.opts.NodeName
	if h.opts.Cluster != nil {
		self = h.opts.Cluster.Self().Name
	}
	reports[self] = local
	var mu sync.Mutex
	errs := h.fanOut(ctx, "targets", func(ctx context.Context, p cluster.Peer) error {
		var td struct {
			ActiveTargets []scrapeState `json:"activeTargets"`
		}
		if err := h.getPeer(ctx, p, "/api/v1/targets", "state=active&fields="+fieldsScrape, &td); err != nil {
			return err
		}
		out := make(map[targetRef]scrapeDetail, len(td.ActiveTargets))
		for _, t := range td.ActiveTargets {
			out[targetRef{t.ScrapePool, t.ScrapeURL}] = t.scrapeDetail
		}
		mu.Lock()
		reports[p.Name] = out
		mu.Unlock()
		return nil
	})
	return reports, errs
}

// targetFilter selects targets of /api/v1/cluster/targets and /cluster.
type targetFilter struct {
	status string // one of Statuses, "problem" (anything not ok) or "" (all)
	job    string
	limit  int // at most this many targets in the answer; 0: all
}

func parseTargetFilter(r *http.Request) (targetFilter, error) {
	q := r.URL.Query()
	f := targetFilter{status: strings.ToLower(q.Get("status")), job: q.Get("job")}
	if f.status != "" && f.status != "problem" && !slices.Contains(Statuses, f.status) {
		return f, fmt.Errorf("unknown status %q: want one of %s or problem", f.status, strings.Join(Statuses, ", "))
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			return f, fmt.Errorf("limit %q: want a number of targets, 0 for all", l)
		}
		f.limit = n
	}
	return f, nil
}

func (f targetFilter) match(ct ClusterTarget) bool {
	if f.job != "" && ct.Job != f.job {
		return false
	}
	switch f.status {
	case "":
		return true
	case "problem":
		return ct.Status != StatusOK
	}
	return ct.Status == f.status
}

// clusterTargets joins the ring's owners with what every node scrapes;
// localTargets are this node's active targets.
func (h *Handler) clusterTargets(ctx context.Context, localTargets []activeTarget, f targetFilter) (ClusterTargets, map[string]map[targetRef]scrapeDetail) {
	reports, errs := h.peerScrapes(ctx, localTargets)
	unreachable := peerErrorNames(errs)
	res := ClusterTargets{Targets: []ClusterTarget{}, Unreachable: unreachable, PeerErrors: errs, Jobs: []JobSummary{}, Counts: map[string]int{}}
	if h.opts.Ownership == nil {
		return res, reports
	}
	names := make([]string, 0, len(reports))
	for n := range reports {
		names = append(names, n)
	}
	sort.Strings(names)
	jobs := map[string]*JobSummary{}
	for _, ti := range h.opts.Ownership.Targets() {
		if ti.Labels.IsEmpty() { // relabelled away: nobody should scrape it
			continue
		}
		ref := targetRef{ti.Job, ti.ScrapeURL}
		ct := ClusterTarget{Job: ti.Job, ScrapeURL: ti.ScrapeURL, Labels: ti.Labels, Owners: ti.Owners, ScrapedBy: []string{}, Key: fmt.Sprintf("%016x", ti.Key)}
		if ct.Owners == nil {
			ct.Owners = []string{}
		}
		for _, n := range names {
			d, ok := reports[n][ref]
			if !ok {
				continue
			}
			ct.ScrapedBy = append(ct.ScrapedBy, n)
			if ct.Health == "" || d.Health != string(promscrape.HealthGood) {
				ct.Health, ct.LastScrape, ct.LastError = d.Health, d.LastScrape, d.LastError
			}
		}
		ct.Status = placementStatus(ct.Owners, ct.ScrapedBy, unreachable)

		res.Total++
		res.Counts[ct.Status]++
		js := jobs[ct.Job]
		if js == nil {
			js = &JobSummary{Job: ct.Job, ByStatus: map[string]int{}}
			jobs[ct.Job] = js
		}
		js.Targets++
		js.ByStatus[ct.Status]++
		if ct.Status == StatusOK {
			js.OK++
		} else {
			js.Problems++
		}
		if f.match(ct) {
			res.Targets = append(res.Targets, ct)
		}
	}
	// Problems first, worst first; then the order of the ownership view (job, URL).
	slices.SortStableFunc(res.Targets, func(a, b ClusterTarget) int { return statusRank(a.Status) - statusRank(b.Status) })
	res.Matched = len(res.Targets)
	if f.limit > 0 && len(res.Targets) > f.limit {
		res.Targets = res.Targets[:f.limit]
	}
	for _, js := range jobs {
		res.Jobs = append(res.Jobs, *js)
	}
	// Jobs with problems first, then by name.
	slices.SortFunc(res.Jobs, func(a, b JobSummary) int {
		if (a.Problems > 0) != (b.Problems > 0) {
			if a.Problems > 0 {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Job, b.Job)
	})
	return res, reports
}

func placementStatus(owners, scrapedBy, unreachable []string) string {
	for _, o := range owners {
		// An owner that could not be asked may well be scraping it.
		if slices.Contains(unreachable, o) && !slices.Contains(scrapedBy, o) {
			return StatusUnknown
		}
	}
	switch {
	case len(scrapedBy) == 0:
		return StatusOrphan
	case len(scrapedBy) > len(owners):
		return StatusDuplicate
	}
	for _, s := range scrapedBy {
		if !slices.Contains(owners, s) {
			return StatusMisplaced
		}
	}
	return StatusOK
}

func (h *Handler) apiClusterTargets(w http.ResponseWriter, r *http.Request) {
	f, err := parseTargetFilter(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiResponse{Status: "error", ErrorType: "bad_data", Error: err.Error()})
		return
	}
	ct, _ := h.clusterTargets(r.Context(), h.activeTargets(), f)
	writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: ct})
}
