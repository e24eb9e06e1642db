package web

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
	shoalscrape "github.com/shoal-dev/shoal/scrape"
	"github.com/shoal-dev/shoal/wal"
)

// openWAL opens a real WAL registered on reg and appends n series, one
// sample each, at ts.
func openWAL(t *testing.T, reg prometheus.Registerer) *wal.Storage {
	t.Helper()
	w, err := wal.Open(t.TempDir(), wal.Options{}, promslog.NewNopLogger(), reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func appendSeries(t *testing.T, w *wal.Storage, n int, ts time.Time) {
	t.Helper()
	app := w.AppenderV2(context.Background())
	for i := range n {
		if _, err := app.Append(0, labels.FromStrings("__name__", "m", "i", fmt.Sprint(i)), 0, ts.UnixMilli(), 1, nil, nil, storage.AOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestLoadFromRealWAL reads series, samples/s and WAL size from a real WAL's
// metrics, and the remote-write lag from the queue metrics' names.
func TestLoadFromRealWAL(t *testing.T) {
	reg := prometheus.NewRegistry()
	w := openWAL(t, reg)
	highest := prometheus.NewGauge(prometheus.GaugeOpts{Name: metricRWHighest})
	sent := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricRWQueueSent}, []string{"remote_name", "url"})
	pending := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricRWSamplesPending}, []string{"remote_name", "url"})
	reg.MustRegister(highest, sent, pending)
	highest.Set(1000)
	sent.WithLabelValues("a", "http://a/write").Set(990)
	sent.WithLabelValues("b", "http://b/write").Set(0) // has sent nothing yet
	pending.WithLabelValues("a", "http://a/write").Set(42)

	m := &loadMeter{g: reg}
	t0 := time.Now()
	appendSeries(t, w, 10, t0)
	l := m.read(t0)
	if l.Series != 10 || l.WALBytes <= 0 || l.SamplesPerSecond != 0 {
		t.Fatalf("first read: %+v (no rate without history)", l)
	}
	appendSeries(t, w, 10, t0.Add(time.Second)) // 10 more samples
	l = m.read(t0.Add(5 * time.Second))
	if l.SamplesPerSecond != 2 {
		t.Errorf("samples/s = %v, want 10 samples / 5s = 2", l.SamplesPerSecond)
	}
	if len(l.RemoteWrite) != 2 || l.RemoteWrite[0].Name != "a" || *l.RemoteWrite[0].LagSeconds != 10 || l.RemoteWrite[0].SamplesPending != 42 || l.RemoteWrite[1].LagSeconds != nil {
		t.Errorf("queues: %+v", l.RemoteWrite)
	}
}

// TestRateIsReadableWhileGathering: shoal_replica_utilization_ratio is a
// gauge over the meter, registered in the registry the meter gathers:
// computing it must not gather again (it deadlocked when it did).
func TestRateIsReadableWhileGathering(t *testing.T) {
	reg := prometheus.NewRegistry()
	w := openWAL(t, reg)
	m := &loadMeter{g: reg}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "test_utilization"}, m.rate))
	t0 := time.Now()
	appendSeries(t, w, 10, t0)
	m.read(t0)
	appendSeries(t, w, 10, t0.Add(time.Second))
	m.read(t0.Add(5 * time.Second))
	if got := m.rate(); got != 2 {
		t.Errorf("rate = %v, want 10 samples / 5s = 2", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "test_utilization" {
			if got := mf.GetMetric()[0].GetGauge().GetValue(); got != 2 {
				t.Errorf("gauge = %v, want 2", got)
			}
		}
	}
}

// TestRateWindow: the rate covers about the last rateWindow, not the whole life.
func TestRateWindow(t *testing.T) {
	m := &loadMeter{}
	t0 := time.Unix(1000, 0)
	// 1000 samples/s for a minute, then 100/s.
	v := 0.0
	for s := 0; s <= 60; s += 5 {
		v = float64(s) * 1000
		m.observe(t0.Add(time.Duration(s)*time.Second), v)
	}
	for s := 65; s <= 120; s += 5 {
		v += 500
		m.observe(t0.Add(time.Duration(s)*time.Second), v)
	}
	if got := m.observe(t0.Add(125*time.Second), v+500); got != 100 {
		t.Errorf("rate = %v, want 100 (the last %v only)", got, rateWindow)
	}
	if n := len(m.obs); n > int(rateWindow/rateEvery)+2 {
		t.Errorf("keeps %d observations", n)
	}
	if got := m.observe(t0.Add(130*time.Second), 0); got != 0 {
		t.Errorf("after a counter reset rate = %v, want 0", got)
	}
}

// node is one web handler on a real HTTP server, as a peer of the others.
type node struct {
	name string
	srv  *httptest.Server
	reg  *prometheus.Registry
	wal  *wal.Storage
}

// threeNodes starts handlers a, b and c with real WALs; a holds 30 series,
// b 20, c 10. The scrapes and targets are those of
// TestClusterTargetsShowDuplicatesAndOrphans.
func threeNodes(t *testing.T, mutate func(name string, o *Options)) map[string]*node {
	urlOf := func(addr string) string { return "http://" + addr + "/metrics" }
	ti := func(addr string, owners ...string) shoalscrape.TargetInfo {
		return shoalscrape.TargetInfo{
			Job: "app", ScrapeURL: urlOf(addr), Owners: owners, Key: shoalscrape.TargetKeyString("app", urlOf(addr)),
			Labels: labels.FromStrings("job", "app", "instance", addr),
		}
	}
	all := discovered{ti("t1:80", "a"), ti("t2:80", "b"), ti("t3:80", "c"), ti("t4:80", "a"),
		{Job: "web", ScrapeURL: urlOf("w1:80"), Owners: []string{"c"}, Key: shoalscrape.TargetKeyString("web", urlOf("w1:80")), Labels: labels.FromStrings("job", "web")}}
	scrapes := map[string]scraping{
		"a": {"app": {target("app", "t1:80"), target("app", "t2:80")}},
		"b": {"app": {target("app", "t2:80"), target("app", "t4:80")}},
		"c": {"web": {target("web", "w1:80")}},
	}
	nodes := map[string]*node{}
	mem := map[string]*members{}
	var peers []cluster.Peer
	for i, name := range []string{"a", "b", "c"} {
		n := &node{name: name, reg: prometheus.NewRegistry()}
		n.wal = openWAL(t, n.reg)
		appendSeries(t, n.wal, 30-10*i, time.Now())
		h := &handlerRef{}
		n.srv = httptest.NewServer(h)
		t.Cleanup(n.srv.Close)
		u, _ := url.Parse(n.srv.URL)
		peers = append(peers, cluster.Peer{Name: name, Addr: "10.0.0." + fmt.Sprint(i+1) + ":7946", HTTPAddr: u.Host, State: cluster.Participant})
		mem[name] = &members{self: name}
		o := Options{
			Scrape: scrapes[name], Ownership: all, Cluster: mem[name], NodeName: name, Gatherer: n.reg, Version: "test",
			Ring: func() *ring.Ring { return ring.New([]string{"a", "b", "c"}, 16) },
			// Each view asks anew: tests stop peers and look again at once.
			PeerAnswerTTL: time.Nanosecond,
		}
		if mutate != nil {
			mutate(name, &o)
		}
		h.h = New(o, promslog.NewNopLogger())
		nodes[name] = n
	}
	for _, m := range mem {
		m.peers = peers
	}
	return nodes
}

func TestPeersCarryLoadFetchedFromPeers(t *testing.T) {
	nodes := threeNodes(t, nil)
	var resp struct {
		Status string    `json:"status"`
		Data   PeersData `json:"data"`
	}
	getJSON(t, nodes["c"].srv.URL+"/api/v1/cluster/peers", &resp)
	want := map[string]int64{"a": 30, "b": 20, "c": 10}
	for _, p := range resp.Data.Peers {
		if p.Series != want[p.Name] || p.Error != "" || p.LastHeard.IsZero() || !p.Ready || p.Version != "test" || p.WALBytes <= 0 {
			t.Errorf("peer %s: %+v, want %d series", p.Name, p, want[p.Name])
		}
	}
	if s := resp.Data.Spread.Series; s.Max != 30 || s.Mean != 20 || s.MaxNode != "a" || s.Ratio() != 1.5 {
		t.Errorf("series spread %+v", s)
	}
	if len(resp.Data.PeerErrors) != 0 {
		t.Errorf("peer errors %v", resp.Data.PeerErrors)
	}

	// b goes away: it is listed with the reason, the others keep their figures.
	nodes["b"].srv.Close()
	getJSON(t, nodes["c"].srv.URL+"/api/v1/cluster/peers", &resp)
	if len(resp.Data.PeerErrors) != 1 || resp.Data.PeerErrors[0].Name != "b" || !strings.Contains(resp.Data.PeerErrors[0].Error, "connection refused") {
		t.Fatalf("peer errors %v", resp.Data.PeerErrors)
	}
	for _, p := range resp.Data.Peers {
		if p.Name == "b" && (p.Error == "" || p.Series != 0) || p.Name != "b" && p.Series != want[p.Name] {
			t.Errorf("peer %s: %+v", p.Name, p)
		}
	}
	if s := resp.Data.Spread.Series; s.Max != 30 || s.Mean != 20 {
		t.Errorf("spread over the peers that answered: %+v", s)
	}
}

func TestClusterTargetsFilters(t *testing.T) {
	nodes := threeNodes(t, nil)
	base := nodes["c"].srv.URL + "/api/v1/cluster/targets"
	get := func(q string) ClusterTargets {
		var resp struct {
			Data ClusterTargets `json:"data"`
		}
		getJSON(t, base+q, &resp)
		return resp.Data
	}
	all := get("")
	var order []string
	for _, ct := range all.Targets {
		order = append(order, ct.Status)
	}
	// Problems first, worst first.
	if got := strings.Join(order, ","); got != "orphan,duplicate,misplaced,ok,ok" {
		t.Errorf("order %s", got)
	}
	if all.Total != 5 || all.Counts["ok"] != 2 || all.Counts["duplicate"] != 1 || len(all.Jobs) != 2 ||
		all.Jobs[0].Job != "app" || all.Jobs[0].Problems != 3 || all.Jobs[0].OK != 1 || all.Jobs[1].OK != 1 {
		t.Errorf("summary: total %d counts %v jobs %+v", all.Total, all.Counts, all.Jobs)
	}
	if d := get("?status=duplicate"); len(d.Targets) != 1 || d.Targets[0].ScrapeURL != "http://t2:80/metrics" || d.Total != 5 {
		t.Errorf("?status=duplicate: %+v", d.Targets)
	}
	if d := get("?status=problem"); len(d.Targets) != 3 {
		t.Errorf("?status=problem: %d targets", len(d.Targets))
	}
	if d := get("?job=web"); len(d.Targets) != 1 || d.Targets[0].Status != "ok" || d.Targets[0].Key == "" {
		t.Errorf("?job=web: %+v", d.Targets)
	}
	if d := get("?job=web&status=orphan"); len(d.Targets) != 0 {
		t.Errorf("?job=web&status=orphan: %+v", d.Targets)
	}
	resp, err := http.Get(base + "?status=lost")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), `unknown status \"lost\"`) {
		t.Errorf("?status=lost: %d %s", resp.StatusCode, b)
	}
}

func TestExplainWalksTheRing(t *testing.T) {
	nodes := threeNodes(t, nil)
	var resp struct {
		Data ExplainData `json:"data"`
	}
	getJSON(t, nodes["a"].srv.URL+"/api/v1/cluster/explain?target="+url.QueryEscape("app/http://t2:80/metrics"), &resp)
	if len(resp.Data.Targets) != 1 {
		t.Fatalf("explain: %+v", resp.Data)
	}
	ex := resp.Data.Targets[0]
	key := shoalscrape.TargetKeyString("app", "http://t2:80/metrics")
	r := ring.New([]string{"a", "b", "c"}, 16)
	primary := r.Primary(key)
	if ex.Key != fmt.Sprintf("%016x", key) || len(ex.Walk) != 1 || ex.Walk[0].Node != primary || !ex.Walk[0].NewOwner || ex.Previous == nil {
		t.Fatalf("walk %+v from %s, want first token of %s", ex.Walk, ex.Key, primary)
	}
	// The key lies in (previous, first]: the arc the first token owns.
	prev, first := ex.Previous.Position, ex.Walk[0].Position
	if !(prev < ex.Position && ex.Position <= first) && !(prev > first && (ex.Position > prev || ex.Position <= first)) {
		t.Errorf("key at %v is not between %v and %v", ex.Position, prev, first)
	}
	// The fixture says b owns t2, which the plain ring may not: then the note says so.
	if (primary != "b") != (ex.Note != "") {
		t.Errorf("ring primary %s, owners in force [b], note %q", primary, ex.Note)
	}
	if ex.Status != "duplicate" || len(ex.Scrapes) != 2 || ex.Scrapes[0].Node != "a" || ex.Scrapes[0].Health != "unknown" {
		t.Errorf("scrapes %+v, status %s", ex.Scrapes, ex.Status)
	}
	// By host:port, and a target nobody has.
	getJSON(t, nodes["a"].srv.URL+"/api/v1/cluster/explain?target=w1:80", &resp)
	if len(resp.Data.Targets) != 1 || resp.Data.Targets[0].Job != "web" {
		t.Errorf("by host:port: %+v", resp.Data.Targets)
	}
	getJSON(t, nodes["a"].srv.URL+"/api/v1/cluster/explain?target=nope:1", &resp)
	if len(resp.Data.Targets) != 0 {
		t.Errorf("unknown target: %+v", resp.Data.Targets)
	}
}

func TestParseTargetArg(t *testing.T) {
	for in, want := range map[string][2]string{
		"http://h:80/metrics":     {"", "http://h:80/metrics"},
		"job/http://h:80/metrics": {"job", "http://h:80/metrics"},
		"job/h:80":                {"job", "h:80"},
		"h:80":                    {"", "h:80"},
		"h:80/metrics":            {"", "h:80/metrics"},
	} {
		if j, u := parseTargetArg(in); j != want[0] || u != want[1] {
			t.Errorf("%q: %q %q, want %q", in, j, u, want)
		}
	}
}

// TestPagesShowLoadAndProblems renders the three pages and checks what a
// person needs during an incident is on them.
func TestPagesShowLoadAndProblems(t *testing.T) {
	nodes := threeNodes(t, nil)
	page := func(path string) string {
		t.Helper()
		resp, err := http.Get(nodes["c"].srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s %s", path, resp.Status, b)
		}
		return string(b)
	}
	contains := func(path, body string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(body, w) {
				t.Errorf("%s lacks %q", path, w)
			}
		}
	}
	contains("/", page("/"), `id="node-series">10<`, `data-peer="a" data-state="participant"`, `data-series="30"`, "spread max/mean", "1.50", "(max a)", "Targets scraped by this node (1")
	contains("/cluster", page("/cluster"), "3 targets need attention", `data-status="orphan"`, `href="/cluster?status=duplicate"`, `<a href="/cluster?job=app">app</a>`)
	filtered := page("/cluster?status=misplaced&job=app")
	contains("/cluster?status=misplaced", filtered, `data-url="http://t4:80/metrics"`)
	if strings.Count(filtered, `class="target"`) != 1 {
		t.Errorf("filtered page shows %d targets", strings.Count(filtered, `class="target"`))
	}
	contains("/target", page("/target?job=app&target=http://t2:80/metrics"), "Tokens that decide the owners", "previous token", "owners by rank")
	contains("/static/refresh.js", page("/static/refresh.js"), "autorefresh")

	nodes["a"].srv.Close()
	contains("/cluster", page("/cluster"), `class="alert unreachable-peer" data-peer="a"`, "Could not ask a", "connection refused", `unknown (`)
}

// TestPeerClientTLSAndBasicAuth: with TLS in the web config, peers are asked
// over https with the client configuration's CA and basic auth; without it
// the page says why they could not be asked.
func TestPeerClientTLSAndBasicAuth(t *testing.T) {
	const password = "peer-Passw0rd"
	peerHandler := New(Options{NodeName: "b", Gatherer: prometheus.NewRegistry()}, promslog.NewNopLogger())
	peer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "peer" || p != password {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		peerHandler.ServeHTTP(w, r)
	}))
	defer peer.Close()
	u, _ := url.Parse(peer.URL)

	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(ca, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: peer.Certificate().Raw})))
	write(filepath.Join(dir, "pw"), password)
	webCfg := filepath.Join(dir, "web.yml")
	write(webCfg, "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n")
	clientCfg := filepath.Join(dir, "client.yml")
	write(clientCfg, "basic_auth:\n  username: peer\n  password_file: "+filepath.Join(dir, "pw")+"\ntls_config:\n  ca_file: "+ca+"\n")

	mem := &members{self: "a", peers: []cluster.Peer{
		{Name: "a", State: cluster.Participant},
		{Name: "b", HTTPAddr: u.Host, State: cluster.Participant},
	}}
	ask := func(clientConfig string) PeersData {
		h := New(Options{NodeName: "a", Cluster: mem, WebConfigFile: webCfg, PeerClientConfigFile: clientConfig, Gatherer: prometheus.NewRegistry()}, promslog.NewNopLogger())
		if h.initErr != nil || h.scheme != "https" {
			t.Fatalf("init: %v, scheme %s", h.initErr, h.scheme)
		}
		return h.peers(context.Background())
	}
	if d := ask(clientCfg); len(d.PeerErrors) != 0 {
		t.Errorf("with the client configuration: %v", d.PeerErrors)
	}
	// Trusting the CA but without the password: a 401, named with the fix.
	write(filepath.Join(dir, "noauth.yml"), "tls_config:\n  ca_file: "+ca+"\n")
	d := ask(filepath.Join(dir, "noauth.yml"))
	if len(d.PeerErrors) != 1 || !strings.Contains(d.PeerErrors[0].Error, "401") || !strings.Contains(d.PeerErrors[0].Error, "--web.client-config.file") {
		t.Errorf("without credentials: %v", d.PeerErrors)
	}
	// A client configuration that does not load stops Run with a clear error.
	h := New(Options{NodeName: "a", PeerClientConfigFile: filepath.Join(dir, "missing.yml")}, promslog.NewNopLogger())
	if err := h.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "missing.yml") {
		t.Errorf("Run with a missing client config: %v", err)
	}
}
