package web

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
	shoalscrape "github.com/shoal-dev/shoal/scrape"
)

// scraping is a node's scrape manager as the web package sees it: real
// Prometheus targets, grouped by job.
type scraping map[string][]*promscrape.Target

func (s scraping) TargetsActive() map[string][]*promscrape.Target { return s }

func target(job, addr string) *promscrape.Target {
	lbls := labels.FromStrings(
		model.JobLabel, job,
		model.AddressLabel, addr,
		model.SchemeLabel, "http",
		model.MetricsPathLabel, "/metrics",
		model.ScrapeIntervalLabel, "1s",
		model.ScrapeTimeoutLabel, "1s",
	)
	return promscrape.NewTarget(lbls, &config.ScrapeConfig{JobName: job}, nil, nil)
}

type discovered []shoalscrape.TargetInfo

func (d discovered) Targets() []shoalscrape.TargetInfo { return d }

func (d discovered) OwnedCounts() map[string]int {
	counts := map[string]int{}
	for _, ti := range d {
		for _, o := range ti.Owners {
			counts[o]++
		}
	}
	return counts
}

type members struct {
	self  string
	peers []cluster.Peer
}

func (m *members) Self() cluster.Peer {
	for _, p := range m.peers {
		if p.Name == m.self {
			return p
		}
	}
	return cluster.Peer{}
}

func (m *members) Peers() []cluster.Peer {
	out := make([]cluster.Peer, len(m.peers))
	for i, p := range m.peers {
		p.Self = p.Name == m.self
		out[i] = p
	}
	return out
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", u, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// TestClusterTargetsShowDuplicatesAndOrphans runs three nodes' web handlers
// on real HTTP servers: the cluster-wide view asked of any node must show
// who the ring says owns each target and who really scrapes it.
func TestClusterTargetsShowDuplicatesAndOrphans(t *testing.T) {
	urlOf := func(addr string) string { return "http://" + addr + "/metrics" }
	ti := func(addr string, owners ...string) shoalscrape.TargetInfo {
		return shoalscrape.TargetInfo{
			Job: "app", ScrapeURL: urlOf(addr), Owners: owners,
			Labels: labels.FromStrings("job", "app", "instance", addr),
		}
	}
	// t1 is fine; t2 is scraped by its owner and by a node that lost it
	// (duplicate); t3 is scraped by nobody (orphan); t4 by the wrong node.
	all := discovered{ti("t1:80", "a"), ti("t2:80", "b"), ti("t3:80", "c"), ti("t4:80", "a")}
	scrapes := map[string]scraping{
		"a": {"app": {target("app", "t1:80"), target("app", "t2:80")}},
		"b": {"app": {target("app", "t2:80"), target("app", "t4:80")}},
		"c": {},
	}

	mem := map[string]*members{}
	servers := map[string]*httptest.Server{}
	var peers []cluster.Peer
	for _, name := range []string{"a", "b", "c"} {
		h := &handlerRef{}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		servers[name] = srv
		u, _ := url.Parse(srv.URL)
		peers = append(peers, cluster.Peer{Name: name, Addr: name + ":7946", HTTPAddr: u.Host, State: cluster.Participant})
		mem[name] = &members{self: name}
		h.h = New(Options{
			Scrape: scrapes[name], Ownership: all, Cluster: mem[name], NodeName: name,
			Ring: func() *ring.Ring { return ring.New([]string{"a", "b", "c"}, 16) },
			// Each view asks anew: the test stops a peer and looks again at once.
			PeerAnswerTTL: time.Nanosecond,
		}, promslog.NewNopLogger())
	}
	for _, m := range mem {
		m.peers = peers
	}

	var resp struct {
		Status string         `json:"status"`
		Data   ClusterTargets `json:"data"`
	}
	getJSON(t, servers["c"].URL+"/api/v1/cluster/targets", &resp)
	if resp.Status != "success" || len(resp.Data.Targets) != 4 {
		t.Fatalf("got %+v", resp)
	}
	want := map[string]struct {
		status    string
		scrapedBy string
	}{
		urlOf("t1:80"): {"ok", "a"},
		urlOf("t2:80"): {"duplicate", "a,b"},
		urlOf("t3:80"): {"orphan", ""},
		urlOf("t4:80"): {"misplaced", "b"},
	}
	for _, ct := range resp.Data.Targets {
		w := want[ct.ScrapeURL]
		if ct.Status != w.status || strings.Join(ct.ScrapedBy, ",") != w.scrapedBy {
			t.Errorf("%s: status %q scrapedBy %v, want %q by %q", ct.ScrapeURL, ct.Status, ct.ScrapedBy, w.status, w.scrapedBy)
		}
	}

	// The /cluster page shows the same placement, and this node's own targets.
	page, err := http.Get(servers["a"].URL + "/cluster")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	for _, want := range []string{"duplicate", "orphan", "misplaced", "Targets scraped by this node (2", "http://t1:80/metrics"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/cluster page lacks %q", want)
		}
	}

	// A peer that stops answering is named, and its scrapes are missing rather than invented.
	servers["b"].Close()
	getJSON(t, servers["c"].URL+"/api/v1/cluster/targets", &resp)
	if strings.Join(resp.Data.Unreachable, ",") != "b" {
		t.Fatalf("unreachable = %v, want [b]", resp.Data.Unreachable)
	}
	for _, ct := range resp.Data.Targets {
		switch ct.ScrapeURL {
		case urlOf("t2:80"): // owned by b, which cannot be asked
			if ct.Status != "unknown" {
				t.Errorf("t2's owner is unreachable: status %q, want unknown", ct.Status)
			}
		case urlOf("t3:80"): // owned by c, which answers and does not scrape it
			if ct.Status != "orphan" {
				t.Errorf("t3: status %q, want orphan", ct.Status)
			}
		}
	}
}

// handlerRef lets a server start before its handler exists (the handler needs the server's address).
type handlerRef struct{ h http.Handler }

func (r *handlerRef) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.h.ServeHTTP(w, req) }

func TestPeersFollowSpecShape(t *testing.T) {
	peers := []cluster.Peer{
		{Name: "a", Addr: "127.0.0.1:7946", State: cluster.Participant, StartTime: time.Unix(1, 0)},
		{Name: "b", Addr: "127.0.0.2:7946", State: cluster.Viewer},
	}
	r := ring.New([]string{"a"}, 512)
	h := New(Options{
		Cluster:   &members{self: "a", peers: peers},
		Ownership: discovered{{Job: "j", ScrapeURL: "http://x/metrics", Owners: []string{"a"}, Owned: true}},
		Ring:      func() *ring.Ring { return r },
	}, promslog.NewNopLogger())
	srv := httptest.NewServer(h)
	defer srv.Close()

	var raw map[string]any
	getJSON(t, srv.URL+"/api/v1/cluster/peers", &raw)
	data := raw["data"].(map[string]any)
	if raw["status"] != "success" || data["self"] != "a" {
		t.Fatalf("envelope: %v", raw)
	}
	list := data["peers"].([]any)
	if len(list) != 2 {
		t.Fatalf("peers: %v", list)
	}
	first := list[0].(map[string]any)
	for _, k := range []string{"name", "address", "state", "self", "ownedTargets", "ringShare"} {
		if _, ok := first[k]; !ok {
			t.Errorf("peer entry lacks %q (SPEC): %v", k, first)
		}
	}
	if first["state"] != "participant" || first["self"] != true || first["ownedTargets"].(float64) != 1 || first["ringShare"].(float64) != 1 {
		t.Errorf("peer a: %v", first)
	}
	second := list[1].(map[string]any)
	if second["state"] != "viewer" || second["ringShare"].(float64) != 0 || second["ownedTargets"].(float64) != 0 {
		t.Errorf("a viewer owns nothing: %v", second)
	}
}

func TestTargetsAPIExplainsDrops(t *testing.T) {
	h := New(Options{
		Scrape: scraping{"j": {target("j", "mine:80")}},
		Ownership: discovered{
			{Job: "j", ScrapeURL: "http://mine:80/metrics", Owned: true, Owners: []string{"a"}},
			{Job: "j", ScrapeURL: "http://theirs:80/metrics", Owners: []string{"b"}, DropReason: "owned by b",
				DiscoveredLabels: labels.FromStrings("__address__", "theirs:80")},
		},
	}, promslog.NewNopLogger())
	srv := httptest.NewServer(h)
	defer srv.Close()
	var resp struct {
		Data struct {
			ActiveTargets []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
			} `json:"activeTargets"`
			DroppedTargets []struct {
				DropReason       string            `json:"dropReason"`
				Owners           []string          `json:"owners"`
				DiscoveredLabels map[string]string `json:"discoveredLabels"`
			} `json:"droppedTargets"`
			DroppedTargetCounts map[string]int `json:"droppedTargetCounts"`
		} `json:"data"`
	}
	getJSON(t, srv.URL+"/api/v1/targets", &resp)
	if len(resp.Data.ActiveTargets) != 1 || resp.Data.ActiveTargets[0].ScrapeURL != "http://mine:80/metrics" || resp.Data.ActiveTargets[0].Health != "unknown" {
		t.Fatalf("active: %+v", resp.Data.ActiveTargets)
	}
	if len(resp.Data.DroppedTargets) != 1 || resp.Data.DroppedTargets[0].DropReason != "owned by b" ||
		resp.Data.DroppedTargets[0].DiscoveredLabels["__address__"] != "theirs:80" || resp.Data.DroppedTargetCounts["j"] != 1 {
		t.Fatalf("dropped: %+v", resp.Data)
	}
}

func TestReadyAndReload(t *testing.T) {
	ready, reloadErr := false, errors.New(`loading --config.file="x.yml": line 3: field foo not found`)
	h := New(Options{
		Ready:  func() (bool, string) { return ready, "WAL replay in progress" },
		Reload: func() error { return reloadErr },
	}, promslog.NewNopLogger())
	srv := httptest.NewServer(h)
	defer srv.Close()

	check := func(method, path string, wantCode int, wantBody string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != wantCode || !strings.Contains(string(b), wantBody) {
			t.Errorf("%s %s = %d %q, want %d containing %q", method, path, resp.StatusCode, b, wantCode, wantBody)
		}
	}
	check("GET", "/-/healthy", 200, "healthy")
	check("GET", "/-/ready", 503, "WAL replay in progress")
	ready = true
	check("GET", "/-/ready", 200, "ready")
	check("POST", "/-/reload", 500, "line 3")
	check("GET", "/-/reload", 405, "")
	reloadErr = nil
	check("POST", "/-/reload", 200, "reloaded")
	check("GET", "/", 200, "<html")
	check("GET", "/metrics", 200, "go_goroutines")
	check("GET", "/debug/pprof/heap?debug=1", 200, "heap profile")
}

// With bounded placement each peer entry carries the load the placement
// puts on it and the limit; the plain ring adds nothing.
func TestPeersShowPlacementLoad(t *testing.T) {
	peers := []cluster.Peer{
		{Name: "a", Addr: "127.0.0.1:7946", State: cluster.Participant, Self: true},
		{Name: "b", Addr: "127.0.0.2:7946", State: cluster.Participant},
	}
	r := ring.New([]string{"a", "b"}, 512)
	info := PlacementInfo{Mode: "bounded", Loads: map[string]float64{"a": 120, "b": 80}, Limit: 110, WeighedRate: 118}
	h := New(Options{
		Cluster:   &members{self: "a", peers: peers},
		Ring:      func() *ring.Ring { return r },
		Placement: func() PlacementInfo { return info },
	}, promslog.NewNopLogger())
	srv := httptest.NewServer(h)
	defer srv.Close()
	var resp struct {
		Data PeersData `json:"data"`
	}
	getJSON(t, srv.URL+"/api/v1/cluster/peers", &resp)
	got := map[string]PeerStatus{}
	for _, p := range resp.Data.Peers {
		got[p.Name] = p
	}
	if a := got["a"]; a.Placement != "bounded" || a.PlacementLoad != 120 || a.PlacementLimit != 110 || a.WeighedSamplesPerSecond != 118 {
		t.Errorf("peer a: %+v", a)
	}
	if b := got["b"]; b.PlacementLoad != 80 || b.PlacementLimit != 110 {
		t.Errorf("peer b: %+v", b)
	}
}
