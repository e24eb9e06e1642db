package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"

	"github.com/shoal-dev/shoal/ring"
	shoalscrape "github.com/shoal-dev/shoal/scrape"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// Status page and cluster API tests against real three-node clusters.

// spPeer is one entry of /api/v1/cluster/peers with the load figures.
type spPeer struct {
	Name             string  `json:"name"`
	State            string  `json:"state"`
	Self             bool    `json:"self"`
	OwnedTargets     int     `json:"ownedTargets"`
	RingShare        float64 `json:"ringShare"`
	Series           int64   `json:"series"`
	SamplesPerSecond float64 `json:"samplesPerSecond"`
	ScrapedTargets   int     `json:"scrapedTargets"`
	Error            string  `json:"error"`
}

type spPeers struct {
	Status string `json:"status"`
	Data   struct {
		Self   string   `json:"self"`
		Peers  []spPeer `json:"peers"`
		Spread struct {
			Series struct {
				Max  float64 `json:"max"`
				Mean float64 `json:"mean"`
			} `json:"series"`
		} `json:"spread"`
		PeerErrors []struct{ Name, Error string } `json:"peerErrors"`
	} `json:"data"`
}

type spTargets struct {
	Status string `json:"status"`
	Data   struct {
		Targets     []clusterTarget                `json:"targets"`
		Unreachable []string                       `json:"unreachable"`
		PeerErrors  []struct{ Name, Error string } `json:"peerErrors"`
		Counts      map[string]int                 `json:"counts"`
		Total       int                            `json:"total"`
		Jobs        []struct {
			Job     string
			Targets int
		} `json:"jobs"`
	} `json:"data"`
}

// apiGet fetches a JSON API answer with client from base+path.
func apiGet(client *http.Client, base, path string, v any) error {
	resp, err := client.Get(base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(body))
	}
	return json.Unmarshal(body, v)
}

// checkLoad checks that every one of want peers is a participant that
// answered, that the peers' owned targets add up to targets (each owned
// once), and that every peer owning targets reports series and samples/s
// above zero. A peer may own none: with few targets a third of the ring
// can hold no key.
func checkLoad(p spPeers, want, targets int) error {
	if p.Status != "success" || len(p.Data.Peers) != want {
		return fmt.Errorf("status %q, %d peers, want %d", p.Status, len(p.Data.Peers), want)
	}
	owned := 0
	for _, pr := range p.Data.Peers {
		if pr.State != "participant" || pr.Error != "" || pr.RingShare <= 0 {
			return fmt.Errorf("peer %+v not an answering participant", pr)
		}
		if pr.OwnedTargets > 0 && (pr.Series <= 0 || pr.SamplesPerSecond <= 0) {
			return fmt.Errorf("peer %+v owns targets but reports no load", pr)
		}
		owned += pr.OwnedTargets
	}
	if owned != targets {
		return fmt.Errorf("peers own %d targets, want %d", owned, targets)
	}
	if p.Data.Spread.Series.Max <= 0 || p.Data.Spread.Series.Mean <= 0 {
		return fmt.Errorf("no series spread: %+v", p.Data.Spread)
	}
	return nil
}

// expectedDuplicates are the targets that a node running with replication
// factor 2 scrapes as second owner while the others, with factor 1, leave
// them to the first: the ring says exactly which.
func expectedDuplicates(targets []*target, nodes []string, odd string) []string {
	r := ring.New(nodes, 512)
	var dups []string
	for _, tg := range targets {
		u := "http://" + tg.addr + "/metrics"
		if owners := r.Owners(shoalscrape.TargetKeyString("e2e", u), 2, nil); owners[1] == odd {
			dups = append(dups, u)
		}
	}
	slices.Sort(dups)
	return dups
}

// TestStatusPage runs three real nodes, one of them (node-3) with a
// different replication factor so that it scrapes targets it does not own
// in the others' view: the forced duplicates. It checks the cluster APIs,
// the page in a real browser, and a peer that goes down.
func TestStatusPage(t *testing.T) {
	needBinary(t)
	targets := startTargets(t, 24, 20)
	recv := startReceiver(t)
	cfg := writeConfig(t, t.TempDir(), configOpts{targets: targetAddrs(targets), remoteWriteURL: recv.writeURL()})
	nodes := newClusterAgents(t, 3, cfg, 3)
	nodes[2].spec.extraArgs = append(nodes[2].spec.extraArgs, "--cluster.replication-factor=2")
	startCluster(t, nodes)
	n1 := "http://" + nodes[0].webAddr
	dups := expectedDuplicates(targets, []string{"node-1", "node-2", "node-3"}, "node-3")
	if len(dups) == 0 {
		fatal(t, "the ring gives node-3 no second-owner target; change the target count")
	}
	t.Logf("node-3 (replication factor 2) should duplicate %d of %d targets", len(dups), len(targets))

	t.Run("api", func(t *testing.T) {
		// Load per node: every peer's series and samples/s, fetched over HTTP.
		var p spPeers
		eventually(t, convergeTimeout, "node-1 sees every peer's load", func() error {
			if err := apiGet(httpClient, n1, "/api/v1/cluster/peers", &p); err != nil {
				return err
			}
			if err := checkLoad(p, 3, len(targets)); err != nil { // ownedTargets counts primaries only
				return err
			}
			// Every scrape is counted once, on the node doing it, and its
			// series (20 gauges and a counter per target) are in that node's WAL.
			scraped := 0
			for _, pr := range p.Data.Peers {
				scraped += pr.ScrapedTargets
				if pr.Series < int64(21*pr.ScrapedTargets) {
					return fmt.Errorf("%s scrapes %d targets but has %d series", pr.Name, pr.ScrapedTargets, pr.Series)
				}
			}
			if scraped != len(targets)+len(dups) {
				return fmt.Errorf("%d scrapes, want %d targets + %d duplicates", scraped, len(targets), len(dups))
			}
			return nil
		})
		for _, pr := range p.Data.Peers {
			t.Logf("%s: %d owned targets, %d scraped, %d series, %.1f samples/s", pr.Name, pr.OwnedTargets, pr.ScrapedTargets, pr.Series, pr.SamplesPerSecond)
		}

		// The forced duplicates, exactly those the ring predicts, first when unfiltered.
		var all spTargets
		eventually(t, convergeTimeout, "node-1 reports exactly the predicted duplicates", func() error {
			var d spTargets
			if err := apiGet(httpClient, n1, "/api/v1/cluster/targets?status=duplicate", &d); err != nil {
				return err
			}
			var got []string
			for _, ct := range d.Data.Targets {
				if ct.Status != "duplicate" || !slices.Contains(ct.ScrapedBy, "node-3") || len(ct.Owners) != 1 {
					return fmt.Errorf("%s: status %s owners %v scraped by %v", ct.ScrapeURL, ct.Status, ct.Owners, ct.ScrapedBy)
				}
				got = append(got, ct.ScrapeURL)
			}
			slices.Sort(got)
			if !slices.Equal(got, dups) {
				return fmt.Errorf("duplicates %v, want %v", got, dups)
			}
			if err := apiGet(httpClient, n1, "/api/v1/cluster/targets", &all); err != nil {
				return err
			}
			if all.Data.Total != len(targets) || all.Data.Counts["duplicate"] != len(dups) || all.Data.Counts["ok"] != len(targets)-len(dups) {
				return fmt.Errorf("total %d, counts %v", all.Data.Total, all.Data.Counts)
			}
			return nil
		})
		for i, ct := range all.Data.Targets {
			if want := i < len(dups); (ct.Status == "duplicate") != want {
				fatalf(t, "unfiltered: target %d is %s; the %d duplicates must come first", i, ct.Status, len(dups))
			}
		}
		// The other filters.
		var d spTargets
		if err := apiGet(httpClient, n1, "/api/v1/cluster/targets?status=orphan", &d); err != nil || len(d.Data.Targets) != 0 || d.Data.Total != len(targets) {
			errorf(t, "?status=orphan: %v, %d targets of %d", err, len(d.Data.Targets), d.Data.Total)
		}
		if err := apiGet(httpClient, n1, "/api/v1/cluster/targets?job=e2e&status=problem", &d); err != nil || len(d.Data.Targets) != len(dups) {
			errorf(t, "?job=e2e&status=problem: %v, %d targets", err, len(d.Data.Targets))
		}
		if err := apiGet(httpClient, n1, "/api/v1/cluster/targets?job=other", &d); err != nil || len(d.Data.Targets) != 0 || len(d.Data.Jobs) != 1 {
			errorf(t, "?job=other: %v, %d targets, jobs %v", err, len(d.Data.Targets), d.Data.Jobs)
		}
		if err := apiGet(httpClient, n1, "/api/v1/cluster/targets?status=lost", &d); err == nil || !strings.Contains(err.Error(), "400") {
			errorf(t, "?status=lost: %v, want 400", err)
		}

		// Explain one duplicate: its owner by the ring, and both scrapers.
		var ex struct {
			Data struct {
				Targets []struct {
					Owners []struct {
						Rank int
						Node string
					} `json:"owners"`
					ScrapedBy []string `json:"scrapedBy"`
					Walk      []struct {
						Node     string `json:"node"`
						NewOwner bool   `json:"newOwner"`
					} `json:"walk"`
					Status string `json:"status"`
				} `json:"targets"`
			} `json:"data"`
		}
		if err := apiGet(httpClient, n1, "/api/v1/cluster/explain?target=e2e/"+dups[0], &ex); err != nil {
			fatal(t, err)
		}
		if len(ex.Data.Targets) != 1 || ex.Data.Targets[0].Status != "duplicate" || len(ex.Data.Targets[0].Owners) != 1 ||
			ex.Data.Targets[0].Walk[0].Node != ex.Data.Targets[0].Owners[0].Node || len(ex.Data.Targets[0].ScrapedBy) != 2 {
			errorf(t, "explain %s: %+v", dups[0], ex.Data)
		}
	})

	t.Run("cli", func(t *testing.T) {
		// The same answers from the terminal, through the real binary.
		cli := func(args ...string) string {
			t.Helper()
			out, err := exec.Command(shoalBin, append([]string{"cluster", "--url", n1}, args...)...).CombinedOutput()
			if err != nil {
				fatalf(t, "shoal cluster %v: %v\n%s", args, err, out)
			}
			return string(out)
		}
		var d struct {
			Targets []clusterTarget `json:"targets"`
		}
		if err := json.Unmarshal([]byte(cli("targets", "--status", "duplicate", "-o", "json")), &d); err != nil || len(d.Targets) != len(dups) {
			errorf(t, "targets --status duplicate -o json: %v, %d targets, want %d", err, len(d.Targets), len(dups))
		}
		peers := cli("peers")
		for _, want := range []string{"node-1 *", "node-2", "node-3", "participant", "SAMPLES/S"} {
			if !strings.Contains(peers, want) {
				errorf(t, "shoal cluster peers lacks %q:\n%s", want, peers)
			}
		}
		if ex := cli("explain", "e2e/"+dups[0]); !strings.Contains(ex, "duplicate") || !strings.Contains(ex, "Tokens walked clockwise") {
			errorf(t, "shoal cluster explain:\n%s", ex)
		}
	})

	t.Run("browser", func(t *testing.T) {
		ctx := browser(t)
		if err := chromedp.Do(ctx,
			chromedp.EmulateViewport(1400, 1000),
			chromedp.Navigate(n1+"/cluster"),
			chromedp.WaitVisible(chromedp.CSS("#peer-table")),
		); err != nil {
			fatal(t, err)
		}
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]map[string]string](peerRowsJS))
		if err != nil {
			fatal(t, err)
		}
		if len(rows) != 3 {
			fatalf(t, "peer rows %v, want 3", rows)
		}
		for i, r := range rows {
			if want := fmt.Sprintf("node-%d", i+1); r["peer"] != want || r["state"] != "participant" || r["stateText"] != "participant" {
				errorf(t, "row %d: %v, want %s participant", i, r, want)
			}
			if r["series"] == "" || r["series"] == "0" || r["rate"] == "" || r["rate"] == "0.0" {
				errorf(t, "row %d (%s): no load figures: %v", i, r["peer"], r)
			}
		}
		banner, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#problem-banner")))
		if err != nil {
			fatal(t, err)
		}
		first, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#placement-table tr.target"), "data-status"))
		if err != nil {
			fatal(t, err)
		}
		if first.Value != "duplicate" || !strings.Contains(banner, fmt.Sprintf("%d duplicate", len(dups))) {
			errorf(t, "unfiltered page: first target %q, banner %q", first.Value, banner)
		}
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			fatal(t, err)
		}
		saveScreenshot(t, "status-cluster.png", png)

		if err := chromedp.Do(ctx,
			chromedp.Navigate(n1+"/cluster?status=duplicate"),
			chromedp.WaitVisible(chromedp.CSS("#placement-table")),
		); err != nil {
			fatal(t, err)
		}
		statuses, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#placement-table tr.target")).map(r => r.dataset.status)`))
		if err != nil {
			fatal(t, err)
		}
		firstURL, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#placement-table tr.target"), "data-url"))
		if err != nil {
			fatal(t, err)
		}
		if len(statuses) != len(dups) || slices.ContainsFunc(statuses, func(s string) bool { return s != "duplicate" }) || !slices.Contains(dups, firstURL.Value) {
			errorf(t, "?status=duplicate shows %v (first %s), want %d duplicates", statuses, firstURL.Value, len(dups))
		}
		// The target page explains it.
		if err := chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS("#placement-table tr.target a")),
			chromedp.WaitVisible(chromedp.CSS("section.explain")),
		); err != nil {
			fatal(t, err)
		}
		detail, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("section.explain")))
		if err != nil {
			fatal(t, err)
		}
		for _, want := range []string{"duplicate", firstURL.Value, "Tokens that decide the owners", "owner", "node-3"} {
			if !strings.Contains(detail, want) {
				errorf(t, "target page lacks %q:\n%s", want, detail)
			}
		}
	})

	t.Run("peer down", func(t *testing.T) {
		// SIGKILL: node-2's HTTP port refuses at once, while memberlist
		// still lists it until the failure detector declares it dead.
		nodes[1].kill()
		var p spPeers
		var d spTargets
		eventually(t, failureDetection, "node-1 lists node-2 as unreachable with the rest of the answer", func() error {
			if err := apiGet(httpClient, n1, "/api/v1/cluster/peers", &p); err != nil {
				return err
			}
			if len(p.Data.PeerErrors) != 1 || p.Data.PeerErrors[0].Name != "node-2" {
				return fmt.Errorf("peer errors %v", p.Data.PeerErrors)
			}
			if err := apiGet(httpClient, n1, "/api/v1/cluster/targets", &d); err != nil {
				return err
			}
			if !slices.Equal(d.Data.Unreachable, []string{"node-2"}) {
				return fmt.Errorf("unreachable %v", d.Data.Unreachable)
			}
			return nil
		})
		for _, pr := range p.Data.Peers {
			switch {
			case pr.Name == "node-2" && (pr.Error == "" || pr.Series != 0):
				errorf(t, "node-2 down: %+v", pr)
			case pr.Name != "node-2" && (pr.Error != "" || pr.Series <= 0 || pr.SamplesPerSecond <= 0):
				errorf(t, "%s answered but lacks its load: %+v", pr.Name, pr)
			}
		}
		if !strings.Contains(p.Data.PeerErrors[0].Error, "connection refused") {
			errorf(t, "reason %q does not say why", p.Data.PeerErrors[0].Error)
		}
		if d.Data.Total != len(targets) {
			errorf(t, "the answer lost targets: %d of %d", d.Data.Total, len(targets))
		}
		// The page names it at the top, with the reason, and still shows the others' load.
		resp, err := httpClient.Get(n1 + "/cluster")
		if err != nil {
			fatal(t, err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{`class="alert unreachable-peer" data-peer="node-2"`, "Could not ask node-2", "connection refused", `data-peer="node-3" data-state="participant"`} {
			if !strings.Contains(string(page), want) && !t.Failed() {
				errorf(t, "/cluster with node-2 down lacks %q", want)
			}
		}
		for _, ct := range d.Data.Targets {
			owner2 := slices.Contains(ct.Owners, "node-2")
			if owner2 && ct.Status != "unknown" || !owner2 && ct.Status == "unknown" {
				errorf(t, "%s owned by %v: status %s", ct.ScrapeURL, ct.Owners, ct.Status)
			}
		}
	})
}

const peerRowsJS = `Array.from(document.querySelectorAll("#peer-table tr.peer")).map(r => ({
	peer: r.dataset.peer,
	state: r.dataset.state,
	stateText: r.cells[1].textContent.trim(),
	series: (r.querySelector("[data-series]") || {dataset: {}}).dataset.series || "",
	rate: (r.querySelector("[data-rate]") || {dataset: {}}).dataset.rate || "",
}))`

// browser starts headless Chromium (Debian's chromium package) for chromedp.
// Outside CI a missing browser skips the test; in CI (CI set) it fails it.
func browser(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("CI") != "" {
			fatal(t, "chromium is not installed; .ci/run installs it with apt-get install -y chromium")
		}
		t.Skip("chromium is not installed (apt-get install -y chromium); the browser test runs in CI")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancel()
		cancelAlloc()
	})
	return ctx
}

// saveScreenshot writes the PNG to docs/img/, where the README shows it.
func saveScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		fatalf(t, "screenshot is not a PNG (%d bytes)", len(png))
	}
	// The README's picture is refreshed only on request, so that a test run
	// (CI's included) leaves the work tree as it found it.
	dir := t.TempDir()
	if *updateScreenshots {
		dir = filepath.Join("..", "docs", "img")
	}
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fatal(t, err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		fatal(t, err)
	}
	t.Logf("screenshot saved to %s", path)
}

var updateScreenshots = flag.Bool("update-screenshots", false, "write the status page screenshots to docs/img for the README")

// TestStatusPageTLSBasicAuth runs three nodes that serve only TLS with
// basic auth (exporter-toolkit web config) and ask each other with a client
// configuration: the cluster views must be complete, and the password must
// appear in no answer, page or log.
func TestStatusPageTLSBasicAuth(t *testing.T) {
	needBinary(t)
	const password = "e2e-Sup3r-secret"
	dir := t.TempDir()
	certFile, keyFile, pool := testutil.SelfSignedCert(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		fatal(t, err)
	}
	webCfg := filepath.Join(dir, "web.yml")
	writeFile(t, webCfg, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  peer: %s\n", certFile, keyFile, hash))
	pwFile := filepath.Join(dir, "password")
	writeFile(t, pwFile, password+"\n")
	clientCfg := filepath.Join(dir, "client.yml")
	writeFile(t, clientCfg, fmt.Sprintf("basic_auth:\n  username: peer\n  password_file: %s\ntls_config:\n  ca_file: %s\n", pwFile, certFile))

	targets := startTargets(t, 12, 5)
	cfg := writeConfig(t, t.TempDir(), configOpts{targets: targetAddrs(targets)})
	nodes := newClusterAgents(t, 3, cfg, 3)
	for _, a := range nodes {
		a.spec.extraArgs = append(a.spec.extraArgs, "--web.config.file="+webCfg, "--web.client-config.file="+clientCfg)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &basicAuth{user: "peer", pass: password, rt: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	for _, a := range nodes {
		a.start()
		a.waitHTTP(startTimeout) // a plain request gets a 400 from the TLS server: it is up
	}
	for _, a := range nodes {
		eventually(t, startTimeout, a.spec.name+" ready over TLS", func() error {
			if err := a.exitedEarly(); err != nil {
				fatal(t, err)
			}
			resp, err := client.Get("https://" + a.webAddr + "/-/ready")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return errors.New(resp.Status)
			}
			return nil
		})
	}
	n1 := "https://" + nodes[0].webAddr

	// Without credentials the server refuses: the fan-out below really needs them.
	noAuth := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if err := apiGet(noAuth, n1, "/api/v1/cluster/peers", &spPeers{}); err == nil || !strings.Contains(err.Error(), "401") {
		fatalf(t, "without credentials: %v, want 401", err)
	}

	var p spPeers
	eventually(t, convergeTimeout, "node-1 asks every peer over TLS with basic auth", func() error {
		if err := apiGet(client, n1, "/api/v1/cluster/peers", &p); err != nil {
			return err
		}
		if len(p.Data.PeerErrors) > 0 {
			return fmt.Errorf("peer errors %v", p.Data.PeerErrors)
		}
		return checkLoad(p, 3, len(targets))
	})
	var d spTargets
	eventually(t, convergeTimeout, "the cluster-wide targets over TLS are complete", func() error {
		if err := apiGet(client, n1, "/api/v1/cluster/targets", &d); err != nil {
			return err
		}
		if len(d.Data.Unreachable) > 0 || d.Data.Total != len(targets) || d.Data.Counts["ok"] != len(targets) {
			return fmt.Errorf("unreachable %v, peer errors %v, counts %v of %d", d.Data.Unreachable, d.Data.PeerErrors, d.Data.Counts, d.Data.Total)
		}
		return nil
	})

	// The password is in no answer, page or log line.
	var seen []string
	for _, path := range []string{"/api/v1/cluster/peers", "/api/v1/cluster/targets", "/cluster", "/", "/api/v1/status/node"} {
		resp, err := client.Get(n1 + path)
		if err != nil {
			fatal(t, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		seen = append(seen, string(b))
	}
	for _, a := range nodes {
		b, err := os.ReadFile(a.logPath)
		if err != nil {
			fatal(t, err)
		}
		seen = append(seen, string(b))
	}
	for i, s := range seen {
		if strings.Contains(s, password) {
			errorf(t, "the password appears in output %d", i)
		}
	}
	if !strings.Contains(seen[2], "node-3") || strings.Contains(seen[2], "Could not ask") {
		errorf(t, "/cluster over TLS does not show every peer answering")
	}
}

type basicAuth struct {
	user, pass string
	rt         http.RoundTripper
}

func (b *basicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(b.user, b.pass)
	return b.rt.RoundTrip(r)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		fatal(t, err)
	}
}
