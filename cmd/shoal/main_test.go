package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"

	"github.com/shoal-dev/shoal/internal/testutil"
)

func TestFlagDefaultsFollowSpec(t *testing.T) {
	f, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"config.file", f.configFile, "shoal.yml"},
		{"web.listen-address", f.listenAddress, ":9940"},
		{"storage.path", f.storagePath, "data/"},
		{"cluster.enabled", f.clusterEnabled, false},
		{"cluster.listen-address", f.clusterListen, "0.0.0.0:7946"},
		{"cluster.rejoin-interval", f.rejoinInterval, 60 * time.Second},
		{"cluster.wait-for-size", f.waitForSize, 0},
		{"cluster.wait-timeout", f.waitTimeout, 5 * time.Minute},
		{"cluster.replication-factor", f.replicationFactor, 1},
		{"cluster.tokens", f.tokens, 512},
		{"auto-gomemlimit", f.autoMemLimit, true},
		{"auto-gomemlimit.ratio", f.autoMemLimitRatio, 0.9},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("--%s defaults to %v, SPEC says %v", c.name, c.got, c.want)
		}
	}
}

func TestBadFlagsAreRefusedWithTheirName(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster.replication-factor=0"}, "--cluster.replication-factor"},
		{[]string{"--cluster.tokens=0"}, "--cluster.tokens"},
		{[]string{"--cluster.wait-for-size=-1"}, "--cluster.wait-for-size"},
		{[]string{"--cluster.wait-timeout=soon"}, "cluster.wait-timeout"},
		{[]string{"--storage.wal.segment-size=1KB"}, "--storage.wal.segment-size"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
		{[]string{"--cluster.tokens=100000"}, "--cluster.tokens"},
		{[]string{"--cluster.node-name=", "--cluster.tokens=abc"}, "--cluster.tokens=abc"},
		{[]string{"--auto-gomemlimit.ratio=0"}, "--auto-gomemlimit.ratio"},
		{[]string{"--auto-gomemlimit.ratio=1.5"}, "--auto-gomemlimit.ratio"},
	} {
		_, err := parseFlags(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%v) = %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yml")
	writeFile(t, good, `
global:
  scrape_interval: 10s
  external_labels: {region: eu}
scrape_configs:
  - job_name: a
    static_configs: [{targets: ['127.0.0.1:1']}]
scrape_config_files: ['`+filepath.Join(dir, "extra-*.yml")+`']
remote_write:
  - url: http://127.0.0.1:1/api/v1/write
`)
	writeFile(t, filepath.Join(dir, "extra-1.yml"), `
scrape_configs:
  - job_name: b
    static_configs: [{targets: ['127.0.0.1:2']}]
`)
	cfg, err := loadConfig(good, promslog.NewNopLogger())
	if err != nil {
		t.Fatalf("good config refused: %v", err)
	}
	scfgs, err := cfg.GetScrapeConfigs()
	if err != nil || len(scfgs) != 2 {
		t.Fatalf("want jobs a and b (one from scrape_config_files), got %d, %v", len(scfgs), err)
	}

	for name, tc := range map[string]struct{ content, want string }{
		"unknown field":  {"global:\n  scrape_interval: 10s\n  scrape_intervall: 5s\n", "line 3"},
		"broken yaml":    {"scrape_configs:\n  - job_name: [\n", "yaml"},
		"rules in agent": {"rule_files: ['x.yml']\n", "agent mode"},
		"duplicate job": {"scrape_configs:\n  - job_name: a\n    static_configs: [{targets: ['h:1']}]\n" +
			"  - job_name: a\n    static_configs: [{targets: ['h:2']}]\n", "found multiple scrape configs with job name"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yml")
		writeFile(t, path, tc.content)
		_, err := loadConfig(path, promslog.NewNopLogger())
		if err == nil {
			t.Errorf("%s: config accepted", name)
			continue
		}
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q should name the file and contain %q", name, err, tc.want)
		}
	}

	missing := filepath.Join(dir, "missing-scrape-file.yml")
	writeFile(t, missing, "scrape_config_files: ['"+filepath.Join(dir, "nope", "*.yml")+"']\nscrape_configs: []\n")
	// A scrape_config_files glob that matches nothing is no error, as in Prometheus.
	if _, err := loadConfig(missing, promslog.NewNopLogger()); err != nil {
		t.Errorf("a scrape_config_files glob matching nothing was refused: %v", err)
	}
}

func TestAdvertisedHTTPAddr(t *testing.T) {
	for _, tc := range []struct{ listen, advertise, want string }{
		{"127.0.0.2:9940", "", "127.0.0.2:9940"},
		{":9940", "10.0.0.7", "10.0.0.7:9940"},
		{"0.0.0.0:9940", "10.0.0.7:7946", "10.0.0.7:9940"},
		{":9940", "", ":9940"},
	} {
		if got := advertisedHTTPAddr(tc.listen, tc.advertise); got != tc.want {
			t.Errorf("advertisedHTTPAddr(%q, %q) = %q, want %q", tc.listen, tc.advertise, got, tc.want)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func metricsTarget(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# TYPE demo_requests_total counter\ndemo_requests_total 1")
	}))
	t.Cleanup(s.Close)
	return s
}

func scrapeConfig(jobs map[string]string) string {
	var b strings.Builder
	b.WriteString("global:\n  scrape_interval: 1s\nscrape_configs:\n")
	for job, target := range jobs {
		fmt.Fprintf(&b, "  - job_name: %s\n    static_configs: [{targets: ['%s']}]\n", job, target)
	}
	return b.String()
}

func activeJobs(t *testing.T, base string) map[string]int {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/targets")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			ActiveTargets []struct {
				ScrapePool string `json:"scrapePool"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil
	}
	jobs := map[string]int{}
	for _, at := range body.Data.ActiveTargets {
		jobs[at.ScrapePool]++
	}
	return jobs
}

// TestReload runs the agent in-process: a broken file is refused over
// POST /-/reload with the problem named and the running jobs kept; a good
// file replaces them; cancelling the context shuts the agent down cleanly.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "shoal.yml")
	targetA, targetB := metricsTarget(t), metricsTarget(t)
	writeFile(t, cfgPath, scrapeConfig(map[string]string{"a": strings.TrimPrefix(targetA.URL, "http://")}))

	f, err := parseFlags([]string{
		"--config.file=" + cfgPath,
		"--storage.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + freeAddr(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + f.listenAddress
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, f) }()
	stopped := false
	t.Cleanup(func() {
		if stopped {
			return
		}
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("agent did not stop within 30s of cancellation")
		}
	})

	testutil.EventuallyTrue(t, 30*time.Second, "readiness", func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	testutil.EventuallyTrue(t, 30*time.Second, "job a active", func() bool { return activeJobs(t, base)["a"] == 1 })
	if os.Getenv("GOGC") == "" {
		// runtime.gogc defaults to 75 as in Prometheus; SetGCPercent reads it back.
		if got := debug.SetGCPercent(75); got != 75 {
			t.Errorf("GC percent after loading the config = %d, want runtime.gogc's default 75", got)
		}
	}

	reload := func() (int, string) {
		resp, err := http.Post(base+"/-/reload", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	writeFile(t, cfgPath, "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: a\n    static_configz: []\n")
	code, body := reload()
	if code != http.StatusInternalServerError || !strings.Contains(body, cfgPath) || !strings.Contains(body, "line 5") {
		t.Fatalf("bad config: got %d %q, want 500 naming the file and line 5", code, body)
	}
	if jobs := activeJobs(t, base); jobs["a"] != 1 {
		t.Fatalf("after a refused reload the old job must keep running, got %v", jobs)
	}

	// A file that loads but whose remote write cannot be set up (a missing CA
	// file) is refused whole: its new job must not start either.
	writeFile(t, cfgPath, scrapeConfig(map[string]string{"b": strings.TrimPrefix(targetB.URL, "http://")})+
		"remote_write:\n  - url: https://127.0.0.1:1/api/v1/write\n    tls_config: {ca_file: "+filepath.Join(dir, "missing-ca.pem")+"}\n")
	if code, body := reload(); code != http.StatusInternalServerError || !strings.Contains(body, "missing-ca.pem") {
		t.Fatalf("config with a missing CA file: got %d %q, want 500 naming the file", code, body)
	}
	time.Sleep(2 * time.Second) // a half-applied job would start within the scrape manager's 1s reload
	if jobs := activeJobs(t, base); jobs["a"] != 1 || jobs["b"] != 0 {
		t.Fatalf("after a refused reload only the old job may run, got %v", jobs)
	}

	writeFile(t, cfgPath, scrapeConfig(map[string]string{"b": strings.TrimPrefix(targetB.URL, "http://")}))
	if code, body := reload(); code != http.StatusOK {
		t.Fatalf("good config: got %d %q", code, body)
	}
	testutil.EventuallyTrue(t, 30*time.Second, "job b replacing job a", func() bool {
		jobs := activeJobs(t, base)
		return jobs["b"] == 1 && jobs["a"] == 0
	})

	cancel()
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Fatalf("run returned %v on a clean shutdown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop within 30s of cancellation")
	}
}

// An HTTP address already in use is a clear error at start, not a hang.
func TestBusyListenAddressFailsFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "shoal.yml")
	writeFile(t, cfgPath, "scrape_configs: []\n")
	f, err := parseFlags([]string{"--config.file=" + cfgPath, "--storage.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + l.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run(context.Background(), f) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), l.Addr().String()) {
			t.Fatalf("run = %v, want an error naming %s", err, l.Addr())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run hangs when the HTTP address is in use")
	}
}
