package web

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/shoal-dev/shoal/ring"
	shoalscrape "github.com/shoal-dev/shoal/scrape"
)

// RingToken is one token on the ring.
type RingToken struct {
	Token string `json:"token"` // hex
	// Position is the token's place on the ring, 0 to 1 clockwise.
	Position float64 `json:"position"`
	Node     string  `json:"node"`
	// NewOwner is set on the tokens of a walk that add an owner.
	NewOwner bool `json:"newOwner,omitempty"`
}

// Owner is one owner of a target with its rank (0 is the primary).
type Owner struct {
	Rank int    `json:"rank"`
	Node string `json:"node"`
}

// ScrapeReport is what one scraper says about a target.
type ScrapeReport struct {
	Node               string    `json:"node"`
	Health             string    `json:"health"`
	LastScrape         time.Time `json:"lastScrape,omitzero"`
	LastError          string    `json:"lastError,omitempty"`
	LastScrapeDuration float64   `json:"lastScrapeDuration"`
}

// Explanation says why a target is where it is: its key, the ring tokens
// that decide its owners, who owns it by rank and who really scrapes it.
type Explanation struct {
	Job       string `json:"job"`
	ScrapeURL string `json:"scrapeUrl"`
	Key       string `json:"key"` // hex
	// Position is the key's place on the ring, 0 to 1 clockwise.
	Position          float64  `json:"position"`
	ReplicationFactor int      `json:"replicationFactor"`
	RingNodes         []string `json:"ringNodes"`
	TokensPerNode     int      `json:"tokensPerNode"`
	// Previous is the last token before the key: the key lies in the arc
	// (Previous, Walk[0]].
	Previous *RingToken `json:"previous,omitempty"`
	// Walk are the tokens met walking clockwise from the key until enough
	// distinct owners are found.
	Walk      []RingToken    `json:"walk"`
	Owners    []Owner        `json:"owners"`
	ScrapedBy []string       `json:"scrapedBy"`
	Status    string         `json:"status"`
	Scrapes   []ScrapeReport `json:"scrapes"`
	// Reason says in one sentence why the owners are what they are.
	Reason string `json:"reason"`
	// Note flags an owner list that the plain ring walk does not explain, or a drop reason.
	Note string `json:"note,omitempty"`
}

// ExplainData is the data of /api/v1/cluster/explain.
type ExplainData struct {
	Targets    []Explanation `json:"targets"`
	PeerErrors []PeerError   `json:"peerErrors"`
}

// parseTargetArg splits "JOB/URL" or "URL" (or host:port) into job and the rest.
func parseTargetArg(s string) (job, target string) {
	// A URL's or an address's first slash comes after a colon; a job name
	// has none before its slash.
	i := strings.Index(s, "/")
	if i > 0 && !strings.Contains(s[:i], ":") {
		return s[:i], s[i+1:]
	}
	return "", s
}

// matchTarget reports whether a discovered target is the one the user named:
// its scrape URL, its instance label or the host:port of its URL.
func matchTarget(ti shoalscrape.TargetInfo, job, target string) bool {
	if ti.ScrapeURL == "" || (job != "" && ti.Job != job) {
		return false
	}
	if ti.ScrapeURL == target || ti.Labels.Get("instance") == target {
		return true
	}
	u, err := url.Parse(ti.ScrapeURL)
	return err == nil && u.Host == target
}

func (h *Handler) explain(ctx context.Context, job, target string) ExplainData {
	res := ExplainData{Targets: []Explanation{}, PeerErrors: []PeerError{}}
	if h.opts.Ownership == nil || target == "" {
		return res
	}
	var found []shoalscrape.TargetInfo
	for _, ti := range h.opts.Ownership.Targets() {
		if matchTarget(ti, job, target) {
			found = append(found, ti)
		}
	}
	if len(found) == 0 {
		return res
	}
	cts, reports := h.clusterTargets(ctx, h.activeTargets(), targetFilter{job: job})
	res.PeerErrors = cts.PeerErrors
	byRef := map[targetRef]ClusterTarget{}
	for _, ct := range cts.Targets {
		byRef[targetRef{ct.Job, ct.ScrapeURL}] = ct
	}
	r := h.opts.Ring()
	for _, ti := range found {
		ex := explainKey(r, ti)
		ref := targetRef{ti.Job, ti.ScrapeURL}
		ct := byRef[ref]
		ex.ScrapedBy, ex.Status = ct.ScrapedBy, ct.Status
		if ex.ScrapedBy == nil {
			ex.ScrapedBy = []string{}
		}
		for _, n := range ex.ScrapedBy {
			d := reports[n][ref]
			ex.Scrapes = append(ex.Scrapes, ScrapeReport{Node: n, Health: d.Health, LastScrape: d.LastScrape, LastError: d.LastError, LastScrapeDuration: d.LastScrapeDuration})
		}
		if ex.Scrapes == nil {
			ex.Scrapes = []ScrapeReport{}
		}
		res.Targets = append(res.Targets, ex)
	}
	return res
}

// maxWalk bounds the tokens listed in an explanation's walk.
const maxWalk = 64

// explainKey walks the ring from the target's key (the walk ring.Owners
// makes, as ring.Walk lists it) and checks the result against the owners
// the filter uses.
func explainKey(r *ring.Ring, ti shoalscrape.TargetInfo) Explanation {
	ex := Explanation{
		Job: ti.Job, ScrapeURL: ti.ScrapeURL, Key: fmt.Sprintf("%016x", ti.Key), Position: position(ti.Key),
		ReplicationFactor: max(len(ti.Owners), 1), RingNodes: slices.Clone(r.Nodes()), TokensPerNode: r.TokensPerNode(),
		Walk: []RingToken{}, Owners: []Owner{},
	}
	if ex.RingNodes == nil {
		ex.RingNodes = []string{}
	}
	for i, o := range ti.Owners {
		ex.Owners = append(ex.Owners, Owner{Rank: i, Node: o})
	}
	if r.Len() == 0 {
		ex.Reason = "The ring is empty: no participant can own it."
		ex.Note = ti.DropReason
		return ex
	}
	want := min(ex.ReplicationFactor, r.Len())
	prev, walk := r.Walk(ti.Key, want)
	before := ringToken(prev)
	ex.Previous = &before
	var walked []string
	for _, t := range walk {
		rt := ringToken(t)
		if !slices.Contains(walked, t.Node) {
			walked = append(walked, t.Node)
			rt.NewOwner = true
		}
		if len(ex.Walk) < maxWalk || rt.NewOwner {
			ex.Walk = append(ex.Walk, rt)
		}
	}
	first := ex.Walk[0]
	found := "the first participant met is " + walked[0]
	if want > 1 {
		found = fmt.Sprintf("the first %d distinct participants met are %s", want, strings.Join(walked, ", "))
	}
	ex.Reason = fmt.Sprintf("Key %s lies at %.4f%% of the ring, between token %s of %s and token %s of %s; walking clockwise, %s.",
		ex.Key, ex.Position*100, ex.Previous.Token, ex.Previous.Node, first.Token, first.Node, found)
	switch {
	case len(ti.Owners) == 0:
		ex.Note = "No owner: " + ti.DropReason
	case ti.Sharding == shoalscrape.ShardingAll:
		ex.Note = "Sharding mode all: every participant scrapes it (" + strings.Join(ti.Owners, ", ") + "), each with its own replica label."
	case ti.Sharding == shoalscrape.ShardingNodeLocal && !slices.Equal(walked, ti.Owners):
		ex.Note = "Sharding mode node-local: " + strings.Join(ti.Owners, ", ") + " runs on the target's Kubernetes node."
	case !slices.Equal(walked, ti.Owners):
		ex.Note = fmt.Sprintf("The owners in force (%s) differ from the plain ring walk (%s): the placement mode or a ring change decided otherwise.",
			strings.Join(ti.Owners, ", "), strings.Join(walked, ", "))
	}
	return ex
}

func ringToken(t ring.Token) RingToken {
	return RingToken{Token: fmt.Sprintf("%016x", t.Value), Position: position(t.Value), Node: t.Node}
}

func position(k uint64) float64 { return float64(k) / (float64(math.MaxUint64) + 1) }

func (h *Handler) apiExplain(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	job, target := q.Get("job"), q.Get("target")
	if job == "" {
		job, target = parseTargetArg(target)
	}
	if target == "" {
		writeJSON(w, http.StatusBadRequest, apiResponse{Status: "error", ErrorType: "bad_data", Error: "missing target: give ?target=URL, ?target=JOB/URL or ?target=host:port"})
		return
	}
	writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: h.explain(r.Context(), job, target)})
}
