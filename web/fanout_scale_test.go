package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/shoal-dev/shoal/cluster"
	shoalscrape "github.com/shoal-dev/shoal/scrape"
)

// countingPeers serves /api/v1/status/node for n fake peers on one server,
// counting the requests and the most that were in flight at once. Each
// answer waits for hold, so that concurrent requests overlap.
type countingPeers struct {
	srv               *httptest.Server
	requests          atomic.Int64
	inFlight, maxSeen atomic.Int64
	hold              time.Duration
}

func newCountingPeers(t *testing.T, hold time.Duration) *countingPeers {
	c := &countingPeers{hold: hold}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.requests.Add(1)
		n := c.inFlight.Add(1)
		defer c.inFlight.Add(-1)
		for {
			m := c.maxSeen.Load()
			if n <= m || c.maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(c.hold)
		switch r.URL.Path {
		case "/api/v1/status/node":
			writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: NodeStatus{Ready: true}})
		default:
			writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: targetDiscovery{}})
		}
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// TestFanOutBoundsRequestsInFlight asks 60 peers with a concurrency of 4:
// never more than 4 requests reach peers at once, and every peer is asked.
func TestFanOutBoundsRequestsInFlight(t *testing.T) {
	c := newCountingPeers(t, 20*time.Millisecond)
	h := New(Options{Cluster: &members{self: "self", peers: distinctPeers(c, 60)}, NodeName: "self", PeerConcurrency: 4}, promslog.NewNopLogger())
	d := h.peers(t.Context())
	if len(d.PeerErrors) != 0 {
		t.Fatalf("peer errors: %v", d.PeerErrors)
	}
	if got := c.requests.Load(); got != 60 {
		t.Errorf("%d requests, want one per peer (60)", got)
	}
	if m := c.maxSeen.Load(); m > 4 {
		t.Errorf("%d requests in flight at once, want at most 4", m)
	}
}

// distinctPeers lists n peers, by name, that all answer at c's server, and
// this node ("self").
func distinctPeers(c *countingPeers, n int) []cluster.Peer {
	u, _ := url.Parse(c.srv.URL)
	out := []cluster.Peer{{Name: "self", HTTPAddr: "self.invalid:1", State: cluster.Participant}}
	for i := range n {
		out = append(out, cluster.Peer{Name: fmt.Sprintf("p%03d", i), HTTPAddr: u.Host, State: cluster.Participant})
	}
	return out
}

// TestViewsShareRecentPeerAnswers: ten views at once, then another within
// the TTL, cost each peer one request; after the TTL the next view asks
// again.
func TestViewsShareRecentPeerAnswers(t *testing.T) {
	c := newCountingPeers(t, 50*time.Millisecond)
	h := New(Options{Cluster: &members{self: "self", peers: distinctPeers(c, 5)}, NodeName: "self", PeerAnswerTTL: time.Hour}, promslog.NewNopLogger())
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if d := h.peers(t.Context()); len(d.PeerErrors) != 0 {
				t.Errorf("peer errors: %v", d.PeerErrors)
			}
		})
	}
	wg.Wait()
	h.peers(t.Context())
	if got := c.requests.Load(); got != 5 {
		t.Errorf("%d requests for 11 views of 5 peers within the TTL, want 5", got)
	}

	h.opts.PeerAnswerTTL = time.Nanosecond
	time.Sleep(time.Millisecond) // older than the new TTL
	h.peers(t.Context())
	if got := c.requests.Load(); got != 10 {
		t.Errorf("%d requests after the TTL passed, want 10", got)
	}
}

// TestClusterTargetsLimitKeepsCountsWhole: with limit, the answer lists the
// first targets, problems first, and still counts every target.
func TestClusterTargetsLimitKeepsCountsWhole(t *testing.T) {
	var all discovered
	for i := range 30 {
		owner := "self"
		if i%10 == 0 {
			owner = "gone" // nobody scrapes it: an orphan
		}
		all = append(all, shoalscrape.TargetInfo{Job: "app", ScrapeURL: fmt.Sprintf("http://t%d:80/metrics", i), Owners: []string{owner},
			Labels: labels.FromStrings("job", "app", "instance", fmt.Sprintf("t%d:80", i))})
	}
	var active scraping = scraping{"app": nil}
	for i := range 30 {
		if i%10 != 0 {
			active["app"] = append(active["app"], target("app", fmt.Sprintf("t%d:80", i)))
		}
	}
	h := New(Options{Scrape: active, Ownership: all, NodeName: "self"}, promslog.NewNopLogger())
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	var resp struct {
		Data ClusterTargets `json:"data"`
	}
	getJSON(t, srv.URL+"/api/v1/cluster/targets?limit=5", &resp)
	d := resp.Data
	if len(d.Targets) != 5 || d.Matched != 30 || d.Total != 30 {
		t.Fatalf("%d targets listed, %d matched, %d total; want 5, 30, 30", len(d.Targets), d.Matched, d.Total)
	}
	for i, ct := range d.Targets[:3] {
		if ct.Status != StatusOrphan {
			t.Errorf("target %d is %s, want the orphans first", i, ct.Status)
		}
	}
	if d.Counts[StatusOrphan] != 3 || d.Counts[StatusOK] != 27 {
		t.Errorf("counts %v, want 3 orphans and 27 ok", d.Counts)
	}
	resp.Data = ClusterTargets{}
	getJSON(t, srv.URL+"/api/v1/cluster/targets?status=problem&limit=0", &resp)
	if len(resp.Data.Targets) != 3 || resp.Data.Matched != 3 {
		t.Errorf("problems: %d listed, %d matched; want 3, 3", len(resp.Data.Targets), resp.Data.Matched)
	}
	r, err := http.Get(srv.URL + "/api/v1/cluster/targets?limit=-1")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusBadRequest {
		t.Errorf("limit=-1 answered %s, want 400", r.Status)
	}
}

// manyTargets is a scrape manager with n active targets of one job.
func manyTargets(n int) scraping {
	s := scraping{"app": nil}
	for i := range n {
		s["app"] = append(s["app"], target("app", fmt.Sprintf("10.0.%d.%d:9100", i/250, i%250)))
	}
	return s
}

// The cluster views ask peers for the scrape state alone: the answer has
// every active target, without the labels that made up most of its bytes.
func TestTargetsAPIScrapeFieldsAlone(t *testing.T) {
	h := New(Options{Scrape: manyTargets(3), NodeName: "self"}, promslog.NewNopLogger())
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	var full, short struct {
		Data struct {
			ActiveTargets []map[string]any `json:"activeTargets"`
		} `json:"data"`
	}
	getJSON(t, srv.URL+"/api/v1/targets?state=active", &full)
	getJSON(t, srv.URL+"/api/v1/targets?state=active&fields=scrape", &short)
	if len(short.Data.ActiveTargets) != 3 || len(full.Data.ActiveTargets) != 3 {
		t.Fatalf("%d targets with fields=scrape, %d without; want 3 and 3", len(short.Data.ActiveTargets), len(full.Data.ActiveTargets))
	}
	for i, e := range short.Data.ActiveTargets {
		for _, k := range []string{"labels", "discoveredLabels", "globalUrl"} {
			if _, ok := e[k]; ok {
				t.Errorf("entry %d has %q with fields=scrape", i, k)
			}
		}
		for _, k := range []string{"scrapePool", "scrapeUrl", "health", "lastScrape", "lastError", "lastScrapeDuration"} {
			if e[k] != full.Data.ActiveTargets[i][k] {
				t.Errorf("entry %d: %s = %v with fields=scrape, %v in the full answer", i, k, e[k], full.Data.ActiveTargets[i][k])
			}
		}
	}
}

// A peer of a version that does not know fields=scrape answers the full
// entries; the cluster view reads its scrapes all the same.
func TestClusterTargetsReadPeersThatAnswerFullEntries(t *testing.T) {
	addr := "10.0.0.0:9100"
	old := New(Options{Scrape: manyTargets(1), NodeName: "old"}, promslog.NewNopLogger())
	var asked atomic.Value
	oldSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.URL.Path == "/api/v1/targets" {
			asked.Store(q.Get("fields"))
		}
		q.Del("fields")
		r.URL.RawQuery = q.Encode()
		old.ServeHTTP(w, r)
	}))
	t.Cleanup(oldSrv.Close)
	u, _ := url.Parse(oldSrv.URL)
	peers := []cluster.Peer{
		{Name: "self", State: cluster.Participant},
		{Name: "old", HTTPAddr: u.Host, State: cluster.Participant},
	}
	all := discovered{{Job: "app", ScrapeURL: "http://" + addr + "/metrics", Owners: []string{"old"}, Labels: labels.FromStrings("job", "app", "instance", addr)}}
	h := New(Options{Ownership: all, Cluster: &members{self: "self", peers: peers}, NodeName: "self"}, promslog.NewNopLogger())
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	var resp struct {
		Data ClusterTargets `json:"data"`
	}
	getJSON(t, srv.URL+"/api/v1/cluster/targets", &resp)
	if len(resp.Data.Targets) != 1 || resp.Data.Targets[0].Status != "ok" || len(resp.Data.Targets[0].ScrapedBy) != 1 || resp.Data.Targets[0].ScrapedBy[0] != "old" {
		t.Fatalf("targets %+v, want the one target ok, scraped by old", resp.Data.Targets)
	}
	if got, _ := asked.Load().(string); got != fieldsScrape {
		t.Errorf("the view asked the peer for fields %q, want %q", got, fieldsScrape)
	}
}

// BenchmarkPeerTargetsAnswer is one peer's answer to a cluster view at 100
// targets: served and decoded, full entries (the baseline) against the
// scrape state alone.
func BenchmarkPeerTargetsAnswer(b *testing.B) {
	h := New(Options{Scrape: manyTargets(100), NodeName: "self"}, promslog.NewNopLogger())
	for _, q := range []string{"state=active", "state=active&fields=scrape"} {
		name := "full"
		if q != "state=active" {
			name = "scrape"
		}
		b.Run(name, func(b *testing.B) {
			var size int
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/targets?"+q, nil))
				size = rec.Body.Len()
				var td struct {
					Data struct {
						ActiveTargets []scrapeState `json:"activeTargets"`
					} `json:"data"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &td); err != nil || len(td.Data.ActiveTargets) != 100 {
					b.Fatalf("%d targets, %v", len(td.Data.ActiveTargets), err)
				}
			}
			b.ReportMetric(float64(size), "bytes/answer")
		})
	}
}
