package main

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// authRecorder answers 401 to everything and remembers which kinds of
// credentials it was offered, so the test knows each client really used its secret.
type authRecorder struct {
	mu    sync.Mutex
	kinds map[string]int
}

func (a *authRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	kind := "none"
	if h := r.Header.Get("Authorization"); h != "" {
		kind, _, _ = strings.Cut(h, " ")
	}
	if r.URL.Path == "/token" {
		kind = "token-request"
	}
	a.mu.Lock()
	a.kinds[kind]++
	a.mu.Unlock()
	http.Error(w, "no entry", http.StatusUnauthorized)
}

func (a *authRecorder) snapshot() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.kinds)
}

func (a *authRecorder) seen(kind string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.kinds[kind]
}

// TestSecretsNeverShown runs the agent in-process with a gossip key, TLS and
// basic auth on its HTTP server, and a configuration whose every secret field
// holds a distinctive string: remote-write basic auth, bearer token, OAuth2
// client secret, SigV4 and Azure AD keys, a password in a remote-write URL,
// a secret header, and scrape basic auth and bearer token. The remote end
// answers 401 to all. After start, remote-write failures, a good reload, and
// bad reloads by POST and SIGHUP (one a YAML type error at a secret), no
// secret appears in the log, in any HTTP answer (pages, APIs, /metrics,
// profiles, reload answers) or in the output of `shoal cluster ...`, which
// must work with the credentials.
func TestSecretsNeverShown(t *testing.T) {
	const (
		gossipKey     = "SECRET-gossip-key-0123456789abcd" // 32 bytes
		webPassword   = "SECRET-web-password"
		rwPassword    = "SECRET-rw-basic-password"
		rwBearer      = "SECRET-rw-bearer-token"
		rwOAuth       = "SECRET-rw-oauth2-client-secret"
		rwSigV4       = "SECRET-rw-sigv4-secret-key"
		rwAzure       = "SECRET-rw-azuread-client-secret"
		rwURLPassword = "SECRET-rw-url-password"
		rwHeader      = "SECRET-rw-header-value"
		scrapePass    = "SECRET-scrape-basic-password"
		scrapeBearer  = "SECRET-scrape-bearer-token"
		misplaced     = "Zq9pw7xK" // short: YAML would quote it whole
	)
	secrets := []string{gossipKey, webPassword, rwPassword, rwBearer, rwOAuth, rwSigV4, rwAzure, rwURLPassword, rwHeader, scrapePass, scrapeBearer, misplaced}
	// The encodings a secret travels in on the wire count too.
	for _, s := range []string{"rw:" + rwPassword, "ops:" + webPassword, "scraper:" + scrapePass, "shoal:" + rwOAuth} {
		secrets = append(secrets, base64.StdEncoding.EncodeToString([]byte(s)))
	}

	dir := t.TempDir()
	certFile, keyFile, pool := testutil.SelfSignedCert(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte(webPassword), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(dir, "web.yml")
	writeFile(t, webCfg, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  ops: %s\n", certFile, keyFile, hash))
	writeFile(t, filepath.Join(dir, "web-password"), webPassword+"\n")
	clientCfg := filepath.Join(dir, "client.yml")
	writeFile(t, clientCfg, fmt.Sprintf("basic_auth:\n  username: ops\n  password_file: %s\ntls_config:\n  ca_file: %s\n", filepath.Join(dir, "web-password"), certFile))
	keyFile2 := filepath.Join(dir, "gossip.key")
	writeFile(t, keyFile2, gossipKey+"\n")

	remote := &authRecorder{kinds: map[string]int{}}
	rsrv := httptest.NewServer(remote)
	t.Cleanup(rsrv.Close)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "scraper" || p != scrapePass {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "# TYPE secured_total counter\nsecured_total 1")
	}))
	t.Cleanup(target.Close)
	rhost := strings.TrimPrefix(rsrv.URL, "http://")
	thost := strings.TrimPrefix(target.URL, "http://")

	config := func(extraJob string) string {
		return fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: secured
    basic_auth: {username: scraper, password: %[3]s}
    static_configs: [{targets: ['%[2]s']}]
  - job_name: bearer
    authorization: {credentials: %[4]s}
    static_configs: [{targets: ['%[1]s']}]
%[12]s
remote_write:
  - name: basic
    url: http://%[1]s/basic
    basic_auth: {username: rw, password: %[5]s}
  - name: bearer
    url: http://%[1]s/bearer
    authorization: {credentials: %[6]s}
  - name: oauth2
    url: http://%[1]s/oauth2
    oauth2: {client_id: shoal, client_secret: %[7]s, token_url: 'http://%[1]s/token'}
  - name: sigv4
    url: http://%[1]s/sigv4
    sigv4: {region: eu-west-1, access_key: AKIDSHOALTEST, secret_key: %[8]s}
  - name: azuread
    url: http://%[1]s/azuread
    azuread:
      cloud: AzurePublic
      oauth: {client_id: 00000000-0000-0000-0000-000000000001, client_secret: %[9]s, tenant_id: 00000000-0000-0000-0000-000000000002}
  - name: urlpassword
    url: http://rw:%[10]s@%[1]s/urlpassword
  - name: header
    url: http://%[1]s/header
    headers: {X-Api-Key: %[11]s}
`, rhost, thost, scrapePass, scrapeBearer, rwPassword, rwBearer, rwOAuth, rwSigV4, rwAzure, rwURLPassword, rwHeader, extraJob)
	}
	cfgPath := filepath.Join(dir, "shoal.yml")
	writeFile(t, cfgPath, config(""))

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	authed := &http.Client{Timeout: 30 * time.Second, Transport: &basicAuthRT{user: "ops", pass: webPassword, rt: client.Transport}}
	gossip := freeAddr(t)
	base, log := startAgent(t, authed, "https",
		"--config.file="+cfgPath,
		"--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+freeAddr(t),
		"--web.config.file="+webCfg,
		"--web.client-config.file="+clientCfg,
		"--cluster.enabled",
		"--cluster.node-name=secret-keeper",
		"--cluster.listen-address="+gossip,
		"--cluster.advertise-address="+gossip,
		"--cluster.secret-key-file="+keyFile2,
		"--storage.remote.flush-deadline=1s",
	)

	// Every client really used its secret, and the remote end refused it.
	testutil.Eventually(t, 60*time.Second, "remote write offering basic, bearer and SigV4 credentials, and an OAuth2 token request", func() error {
		for _, k := range []string{"Basic", "Bearer", "AWS4-HMAC-SHA256", "token-request"} {
			if remote.seen(k) == 0 {
				return fmt.Errorf("no request with %s credentials yet (seen %v)", k, remote.snapshot())
			}
		}
		return nil
	})
	testutil.Eventually(t, 30*time.Second, "the secured target scraped with its password", func() error {
		v, err := agentMetric(authed, base, "shoal_wal_samples_appended_total", map[string]string{"type": "float"})
		if err != nil || v == 0 {
			return fmt.Errorf("samples appended %v (%v)", v, err)
		}
		return nil
	})

	var seen []string // every output that must hold no secret
	record := func(what string, b []byte) { seen = append(seen, what+"\n"+string(b)) }
	post := func(what string) int {
		resp, err := authed.Post(base+"/-/reload", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		record(what, b)
		t.Logf("%s: %d %s", what, resp.StatusCode, b)
		return resp.StatusCode
	}
	// A good reload, then bad ones: one a YAML type error at the place of a
	// secret (yaml quotes the value it could not use), one broken YAML right
	// after secrets, by POST and by SIGHUP.
	writeFile(t, cfgPath, config("  - job_name: extra\n    static_configs: [{targets: ['"+thost+"']}]\n"))
	if code := post("good reload"); code != http.StatusOK {
		t.Fatalf("good reload: %d", code)
	}
	writeFile(t, cfgPath, strings.Replace(config(""), "basic_auth: {username: scraper, password: "+scrapePass+"}", "basic_auth: "+misplaced, 1))
	if code := post("reload with a secret where a map belongs"); code != http.StatusInternalServerError {
		t.Fatalf("bad reload: %d", code)
	}
	writeFile(t, cfgPath, config("")+"  - url: [\n")
	if code := post("reload of broken YAML"); code != http.StatusInternalServerError {
		t.Fatalf("bad reload: %d", code)
	}
	failures := func() float64 {
		v, _ := agentMetric(authed, base, "shoal_config_reload_failures_total", nil)
		return v
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, 10*time.Second, "the SIGHUP reload refused", func() bool { return failures() == 3 })

	// Every page and API, the profiles' index and command line included.
	for _, path := range []string{
		"/", "/cluster", "/target?target=" + thost, "/-/healthy", "/-/ready", "/metrics",
		"/api/v1/targets", "/api/v1/cluster/peers", "/api/v1/cluster/targets", "/api/v1/cluster/explain?target=" + thost,
		"/api/v1/status/node", "/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=2",
		"/api/v1/status/config", "/api/v1/status/flags",
	} {
		resp, err := authed.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		record(path, b)
	}
	// The CLI works against the agent with TLS and basic auth.
	cli := []string{"cluster", "--url", base, "--tls.ca-file", certFile, "--basic-auth.username", "ops", "--basic-auth.password-file", filepath.Join(dir, "web-password")}
	for _, args := range [][]string{{"peers"}, {"targets"}, {"explain", thost}, {"-o", "json", "targets"}} {
		out, errOut, code := runCLIWith(t, append(cli, args...)...)
		if code != 0 {
			t.Errorf("shoal %v with credentials: exit %d: %s", args, code, errOut)
		}
		record(fmt.Sprint("cli ", args), []byte(out+errOut))
	}
	if out := seen[len(seen)-4]; !strings.Contains(out, "secret-keeper") {
		t.Errorf("shoal cluster peers does not list the node:\n%s", out)
	}
	if out := seen[len(seen)-3]; !strings.Contains(out, thost) {
		t.Errorf("shoal cluster targets does not list the secured target:\n%s", out)
	}
	// Without the password the CLI is refused, and says so.
	if _, errOut, code := runCLIWith(t, "cluster", "--url", base, "--tls.ca-file", certFile, "peers"); code == 0 || !strings.Contains(errOut, "401") {
		t.Errorf("CLI without credentials: exit %d, %q; want a failure naming 401", code, errOut)
	}
	record("log", []byte(log.String()))
	// The log really covers what happened: the refusals and the remote end's 401s.
	for _, want := range []string{"Configuration reload failed", "401"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log lacks %q: the test did not exercise what it claims", want)
		}
	}

	for _, out := range seen {
		what, body, _ := strings.Cut(out, "\n")
		for _, s := range secrets {
			if i := strings.Index(body, s); i >= 0 {
				t.Errorf("secret %q appears in %s: ...%s...", s, what, body[max(0, i-200):min(len(body), i+len(s)+50)])
			}
		}
		if bytes.Contains([]byte(body), []byte("<secret>")) {
			t.Logf("%s shows redacted secrets", what)
		}
	}
}

type basicAuthRT struct {
	user, pass string
	rt         http.RoundTripper
}

func (b *basicAuthRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(b.user, b.pass)
	return b.rt.RoundTrip(r)
}
