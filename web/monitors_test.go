package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/common/promslog"
)

func TestMonitorSourcesAndRejectedObjects(t *testing.T) {
	h := New(Options{
		Scrape:    scraping{"podMonitor/apps/demo/0": {target("podMonitor/apps/demo/0", "pod:80")}, "file": {target("file", "static:80")}},
		Ownership: discovered{{Job: "podMonitor/apps/demo/0", ScrapeURL: "http://other:80/metrics", Owners: []string{"b"}, DropReason: "owned by b"}},
		Ready:     func() (bool, string) { return true, "" },
		Monitors: func() MonitorJobs {
			return MonitorJobs{
				Sources:  map[string]string{"podMonitor/apps/demo/0": "PodMonitor apps/demo"},
				Rejected: []RejectedObject{{Object: "ServiceMonitor apps/web", Error: `spec.endpoints[0].basicAuth.password: secret apps/auth has no key "pass"`}},
			}
		},
	}, promslog.NewNopLogger())
	srv := httptest.NewServer(h)
	defer srv.Close()

	var resp struct {
		Data struct {
			ActiveTargets []struct {
				ScrapePool string `json:"scrapePool"`
				Source     string `json:"source"`
			} `json:"activeTargets"`
			DroppedTargets []struct {
				Source string `json:"source"`
			} `json:"droppedTargets"`
			RejectedObjects []RejectedObject `json:"rejectedObjects"`
		} `json:"data"`
	}
	getJSON(t, srv.URL+"/api/v1/targets", &resp)
	sources := map[string]string{}
	for _, at := range resp.Data.ActiveTargets {
		sources[at.ScrapePool] = at.Source
	}
	if sources["podMonitor/apps/demo/0"] != "PodMonitor apps/demo" || sources["file"] != "" || len(sources) != 2 {
		t.Errorf("active target sources %v, want the PodMonitor for its job and none for the file's", sources)
	}
	if len(resp.Data.DroppedTargets) != 1 || resp.Data.DroppedTargets[0].Source != "PodMonitor apps/demo" {
		t.Errorf("dropped targets %+v, want the PodMonitor as source", resp.Data.DroppedTargets)
	}
	if len(resp.Data.RejectedObjects) != 1 || resp.Data.RejectedObjects[0].Object != "ServiceMonitor apps/web" || !strings.Contains(resp.Data.RejectedObjects[0].Error, "has no key") {
		t.Errorf("rejected objects %+v", resp.Data.RejectedObjects)
	}

	res, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{`<td class="source">PodMonitor apps/demo</td>`, `id="rejected-objects"`, `data-object="ServiceMonitor apps/web"`, `has no key &#34;pass&#34;`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("status page lacks %s", want)
		}
	}
}

func TestNoRejectedObjectsSectionWithoutMonitors(t *testing.T) {
	h := New(Options{Ready: func() (bool, string) { return true, "" }}, promslog.NewNopLogger())
	srv := httptest.NewServer(h)
	defer srv.Close()
	res, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if strings.Contains(string(page), "rejected-objects") {
		t.Error("the status page lists rejected monitor objects without --kubernetes.monitors")
	}
}
