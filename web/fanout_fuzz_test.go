package web

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
)

// FuzzPeerAnswers makes a peer answer /api/v1/status/node and
// /api/v1/targets with arbitrary bytes, over real HTTP: the node asked for
// the cluster-wide views decodes them (or names the peer as unreachable)
// and still answers with valid JSON and renders its page, never panics.
func FuzzPeerAnswers(f *testing.F) {
	all := discovered{
		{Job: "app", ScrapeURL: "http://t1:80/metrics", Owners: []string{"a"}, Labels: labels.FromStrings("job", "app", "instance", "t1:80")},
		{Job: "app", ScrapeURL: "http://t2:80/metrics", Owners: []string{"b"}, Labels: labels.FromStrings("job", "app", "instance", "t2:80")},
	}
	// Seeds: what a real peer answers, from the handler's own encoders.
	var nodeStatus []byte
	peer := New(Options{NodeName: "b", Scrape: scraping{"app": {target("app", "t2:80"), target("app", "t1:80")}}, Ownership: all, Gatherer: prometheus.NewRegistry()}, promslog.NewNopLogger())
	for _, path := range []string{"/api/v1/status/node", "/api/v1/targets?state=active"} {
		rec := httptest.NewRecorder()
		peer.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			f.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
		f.Add(rec.Body.Bytes())
		if nodeStatus == nil {
			nodeStatus = rec.Body.Bytes()
		}
	}
	for _, s := range []string{
		"", "{", "null", `{"status":"error","error":"boom"}`, `{"status":"success","data":null}`,
		`{"status":"success","data":{"activeTargets":[{"scrapePool":"app","scrapeUrl":"http://t1:80/metrics","health":7}]}}`,
		`{"status":"success","data":{"series":-1,"samplesPerSecond":"NaN","remoteWrite":[{}]}}`,
		`{"status":"success","data":{"activeTargets":{}}}`, `[` + "\xff" + `]`,
	} {
		f.Add([]byte(s))
	}

	var body atomic.Pointer[[]byte]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(*body.Load())
	}))
	f.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	mem := &members{self: "a", peers: []cluster.Peer{
		{Name: "a", Addr: "a:7946", State: cluster.Participant},
		{Name: "b", Addr: "b:7946", HTTPAddr: u.Host, State: cluster.Participant},
	}}
	h := New(Options{
		NodeName: "a", Cluster: mem, Ownership: all, Gatherer: prometheus.NewRegistry(),
		Scrape: scraping{"app": {target("app", "t1:80")}},
		Ring:   func() *ring.Ring { return ring.New([]string{"a", "b"}, 16) },
		// Every input is asked for anew, not answered from the previous
		// input's cached answer.
		PeerAnswerTTL: time.Nanosecond,
	}, promslog.NewNopLogger())

	f.Fuzz(func(t *testing.T, answer []byte) {
		body.Store(&answer)
		for _, path := range []string{"/api/v1/cluster/peers", "/api/v1/cluster/targets", "/cluster"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			b, _ := io.ReadAll(rec.Body)
			if rec.Code != http.StatusOK {
				t.Fatalf("%s answered %d: %s", path, rec.Code, b)
			}
			if path != "/cluster" && !json.Valid(b) {
				t.Fatalf("%s answered invalid JSON: %s", path, b)
			}
		}
		// Whatever b said, it is listed once, with its figures or its error.
		var peers struct {
			Data PeersData `json:"data"`
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/cluster/peers", nil))
		if err := json.Unmarshal(rec.Body.Bytes(), &peers); err != nil {
			t.Fatal(err)
		}
		if n := len(peers.Data.Peers); n != 2 {
			t.Fatalf("%d peers listed, want 2", n)
		}
		if bytes.Equal(answer, nodeStatus) && (peers.Data.Peers[1].Error != "" || peers.Data.Peers[1].ScrapedTargets != 2) {
			t.Fatalf("a real node status was not read: %+v", peers.Data.Peers[1])
		}
	})
}
