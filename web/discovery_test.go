package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"

	"github.com/shoal-dev/shoal/discoveryerr"
)

// A discovery error is on the node page and in /api/v1/status/node while it
// lasts, and neither mentions discovery errors once it is over.
func TestDiscoveryErrorsShownWhileCurrent(t *testing.T) {
	var rec discoveryerr.Recorder
	srv := httptest.NewServer(New(Options{NodeName: "n1", Gatherer: prometheus.NewRegistry(), DiscoveryErrors: rec.Errors}, promslog.NewNopLogger()))
	t.Cleanup(srv.Close)
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return string(b)
	}
	apiErrors := func() []discoveryerr.Error {
		t.Helper()
		var r struct {
			Data NodeStatus `json:"data"`
		}
		if err := json.Unmarshal([]byte(get("/api/v1/status/node")), &r); err != nil {
			t.Fatal(err)
		}
		return r.Data.DiscoveryErrors
	}
	check := func(when string) {
		t.Helper()
		if p := get("/"); strings.Contains(p, "Discovery errors") || strings.Contains(p, "discovery-errors") {
			t.Errorf("%s: the page shows a discovery errors section", when)
		}
		if raw := get("/api/v1/status/node"); strings.Contains(raw, "discoveryErrors") {
			t.Errorf("%s: the API answer has discoveryErrors: %s", when, raw)
		}
	}
	check("before any error")

	const text = `failed to list *v1.Pod: pods is forbidden: User "system:serviceaccount:ns:sa" cannot list resource "pods" <in> the namespace "ns"`
	at := time.Now().Add(-3 * time.Second)
	rec.Fail(discoveryerr.Targets, "kubernetes_sd *v1.Pod", text, at)
	rec.Fail(discoveryerr.Targets, "kubernetes_sd *v1.Pod", text, at)
	rec.Fail(discoveryerr.Peers, "kubernetes", "listing pods: forbidden", at)

	p := get("/")
	for _, want := range []string{
		"<h2>Discovery errors</h2>", `id="discovery-errors"`,
		`data-kind="targets" data-method="kubernetes_sd *v1.Pod"`,
		`data-kind="peers" data-method="kubernetes"`,
		// The error text is escaped, not markup.
		`pods is forbidden: User &#34;system:serviceaccount:ns:sa&#34; cannot list resource &#34;pods&#34; &lt;in&gt; the namespace`,
		`<td class="num">2</td>`, "s ago</td>",
	} {
		if !strings.Contains(p, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	got := apiErrors()
	if len(got) != 2 {
		t.Fatalf("API discoveryErrors = %+v, want 2", got)
	}
	want := discoveryerr.Error{Kind: discoveryerr.Targets, Method: "kubernetes_sd *v1.Pod", Text: text, Time: at, Count: 2}
	if g := got[1]; g.Kind != want.Kind || g.Method != want.Method || g.Text != want.Text || !g.Time.Equal(want.Time) || g.Count != want.Count {
		t.Errorf("API discoveryErrors[1] = %+v, want %+v", g, want)
	}
	if g := got[0]; g.Kind != discoveryerr.Peers || g.Method != "kubernetes" {
		t.Errorf("API discoveryErrors[0] = %+v", g)
	}

	rec.OK(discoveryerr.Targets, "kubernetes_sd *v1.Pod")
	rec.OK(discoveryerr.Peers, "kubernetes")
	check("after both recovered")
}
