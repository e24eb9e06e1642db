package main

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/shoal-dev/shoal/web"
)

var update = flag.Bool("update", false, "rewrite the CLI golden files in testdata/cli/golden")

// The API answers in testdata/cli/api were taken from a running three-node
// demo cluster (then one peer made unreachable and one target a duplicate);
// TestCLIFixturesMatchAPI keeps them in the API's shape.
var fixtures = map[string]string{
	"/api/v1/cluster/peers":   "peers.json",
	"/api/v1/cluster/targets": "targets.json",
	"/api/v1/cluster/explain": "explain.json",
}

// fakeAgent serves the recorded API answers and remembers the queries it got.
type fakeAgent struct {
	t       *testing.T
	user    string // basic auth required when set
	pass    string
	mu      sync.Mutex
	queries map[string]string
}

func (f *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.user != "" {
		u, p, ok := r.BasicAuth()
		if !ok || u != f.user || p != f.pass {
			w.Header().Set("WWW-Authenticate", "Basic")
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
	}
	name, ok := fixtures[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	f.queries[r.URL.Path] = r.URL.RawQuery
	f.mu.Unlock()
	b, err := os.ReadFile(filepath.Join("testdata", "cli", "api", name))
	if err != nil {
		f.t.Error(err)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func runCLIWith(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = runCLI(args, &out, &errb)
	return out.String(), errb.String(), code
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "cli", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/shoal -run TestCLI -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test ./cmd/shoal -run TestCLI -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestCLIGolden(t *testing.T) {
	fa := &fakeAgent{t: t, queries: map[string]string{}}
	srv := httptest.NewServer(fa)
	defer srv.Close()
	for _, tc := range []struct {
		golden    string
		args      []string
		path      string
		wantQuery string
	}{
		{"peers.txt", []string{"peers"}, "/api/v1/cluster/peers", ""},
		{"peers.json", []string{"-o", "json", "peers"}, "/api/v1/cluster/peers", ""},
		{"targets.txt", []string{"targets", "--status", "duplicate", "--job", "shoal"}, "/api/v1/cluster/targets", "job=shoal&status=duplicate"},
		{"targets.json", []string{"--output=json", "targets"}, "/api/v1/cluster/targets", ""},
		{"explain.txt", []string{"explain", "shoal/http://127.0.0.1:29942/metrics"}, "/api/v1/cluster/explain", "target=shoal%2Fhttp%3A%2F%2F127.0.0.1%3A29942%2Fmetrics"},
		{"explain.json", []string{"-o", "json", "explain", "127.0.0.1:29942"}, "/api/v1/cluster/explain", "target=127.0.0.1%3A29942"},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			args := append([]string{"cluster", "--url", srv.URL}, tc.args...)
			out, errOut, code := runCLIWith(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if q := fa.queries[tc.path]; q != tc.wantQuery {
				t.Errorf("query %q, want %q", q, tc.wantQuery)
			}
			checkGolden(t, tc.golden, strings.ReplaceAll(out, srv.URL, "URL"))
		})
	}
}

// TestCLITLSAndBasicAuth reaches an agent that serves TLS and asks for basic
// auth, as exporter-toolkit's web config makes it, and never prints the password.
func TestCLITLSAndBasicAuth(t *testing.T) {
	const password = "s3cret-Passw0rd"
	fa := &fakeAgent{t: t, queries: map[string]string{}, user: "ops", pass: password}
	srv := httptest.NewTLSServer(fa)
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(dir, "password")
	if err := os.WriteFile(pw, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"cluster", "--url", srv.URL, "--tls.ca-file", ca}

	out, errOut, code := runCLIWith(t, append(base, "--basic-auth.username", "ops", "--basic-auth.password-file", pw, "peers")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkGolden(t, "peers.txt", strings.ReplaceAll(out, srv.URL, "URL"))

	// An HTTP client configuration file does the same.
	cfg := filepath.Join(dir, "http.yml")
	if err := os.WriteFile(cfg, []byte("basic_auth:\n  username: ops\n  password_file: "+pw+"\ntls_config:\n  ca_file: "+ca+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCLIWith(t, "cluster", "--url", srv.URL, "--http.config.file", cfg, "targets"); code != 0 {
		t.Fatalf("with --http.config.file: exit %d: %s", code, errOut)
	}

	// No credentials: a clear error, exit 1.
	_, errOut, code = runCLIWith(t, append(base, "peers")...)
	if code != 1 || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "--basic-auth.username") {
		t.Errorf("without credentials: exit %d, %q", code, errOut)
	}
	// A wrong password: refused, and neither password is printed.
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("wrong-"+password), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCLIWith(t, append(base, "--basic-auth.username", "ops", "--basic-auth.password-file", bad, "peers")...)
	if code != 1 || strings.Contains(out+errOut, password) {
		t.Errorf("wrong password: exit %d, output %q %q", code, out, errOut)
	}
	// Without the CA the certificate is refused.
	if _, errOut, code := runCLIWith(t, "cluster", "--url", srv.URL, "peers"); code != 1 || !strings.Contains(errOut, "certificate") {
		t.Errorf("unknown CA: exit %d, %q", code, errOut)
	}
}

func TestCLIBadUsage(t *testing.T) {
	if _, errOut, code := runCLIWith(t, "cluster", "-o", "yaml", "peers"); code != 2 || !strings.Contains(errOut, "yaml") {
		t.Errorf("-o yaml: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLIWith(t, "cluster", "explain"); code != 2 || !strings.Contains(errOut, "target") {
		t.Errorf("explain without target: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLIWith(t, "cluster", "--url", "http://127.0.0.1:1", "peers"); code != 1 || !strings.Contains(errOut, "connection refused") {
		t.Errorf("nobody listening: exit %d, %q", code, errOut)
	}
}

// TestCLIFixturesMatchAPI decodes the recorded answers strictly into the web
// package's types, so that a renamed or dropped API field breaks here.
func TestCLIFixturesMatchAPI(t *testing.T) {
	for name, v := range map[string]any{
		"peers.json":   &web.PeersData{},
		"targets.json": &web.ClusterTargets{},
		"explain.json": &web.ExplainData{},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "cli", "api", name))
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Status string          `json:"status"`
			Data   json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(env.Data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil || env.Status != "success" {
			t.Errorf("%s does not decode into %T: %v", name, v, err)
		}
	}
}
