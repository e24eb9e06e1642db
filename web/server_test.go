package web

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"golang.org/x/crypto/bcrypt"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/internal/testutil"
)

// serve runs h on a free 127.0.0.1 port until the test ends and returns the address.
func serve(t *testing.T, opts Options, tune func(*Handler)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	opts.ListenAddress = addr
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.NewRegistry()
	}
	h := New(opts, promslog.NewNopLogger())
	if tune != nil {
		tune(h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testutil.Eventually(t, 10*time.Second, "the server listening", func() error {
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		default:
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	})
	return addr
}

// TestEveryRouteNeedsAuth serves the real handler through exporter-toolkit
// with TLS and a bcrypt basic-auth user: every route, the profiles and the
// reload included, answers 401 without credentials or with a wrong password,
// and serves with the right ones. An unauthorised POST /-/reload reloads nothing.
func TestEveryRouteNeedsAuth(t *testing.T) {
	const user, password = "ops", "web-Test-pa55word"
	dir := t.TempDir()
	certFile, keyFile, pool := testutil.SelfSignedCert(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(webCfg, fmt.Appendf(nil, "tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  %s: %s\n", certFile, keyFile, user, hash), 0o600); err != nil {
		t.Fatal(err)
	}
	var reloads atomic.Int32
	addr := serve(t, Options{
		NodeName:      "a",
		WebConfigFile: webCfg,
		Scrape:        scraping{"job": {target("job", "127.0.0.1:1")}},
		Ownership:     discovered{{Job: "job", Owners: []string{"a"}}},
		Cluster:       &members{self: "a", peers: []cluster.Peer{{Name: "a", State: cluster.Participant}}},
		Reload:        func() error { reloads.Add(1); return nil },
	}, nil)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://" + addr

	routes := []struct{ method, path string }{
		{"GET", "/"},
		{"GET", "/cluster"},
		{"GET", "/target?target=127.0.0.1:1"},
		{"GET", "/static/shoal.css"},
		{"GET", "/-/healthy"},
		{"GET", "/-/ready"},
		{"POST", "/-/reload"},
		{"GET", "/metrics"},
		{"GET", "/api/v1/targets"},
		{"GET", "/api/v1/cluster/peers"},
		{"GET", "/api/v1/cluster/targets"},
		{"GET", "/api/v1/cluster/explain?target=127.0.0.1:1"},
		{"GET", "/api/v1/status/node"},
		{"GET", "/debug/pprof/"},
		{"GET", "/debug/pprof/cmdline"},
		{"GET", "/debug/pprof/heap"},
		{"GET", "/debug/pprof/goroutine?debug=1"},
		{"GET", "/debug/pprof/symbol"},
		{"GET", "/debug/pprof/profile?seconds=1"},
		{"GET", "/debug/pprof/trace?seconds=1"},
		{"GET", "/no-such-page"},
	}
	do := func(method, path, u, p string) (int, string) {
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if u != "" {
			req.SetBasicAuth(u, p)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, r := range routes {
		if code, _ := do(r.method, r.path, "", ""); code != http.StatusUnauthorized {
			t.Errorf("%s %s without credentials: %d, want 401", r.method, r.path, code)
		}
		if code, _ := do(r.method, r.path, user, "wrong"); code != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong password: %d, want 401", r.method, r.path, code)
		}
	}
	if n := reloads.Load(); n != 0 {
		t.Fatalf("unauthorised POST /-/reload reloaded %d times", n)
	}
	for _, r := range routes {
		code, body := do(r.method, r.path, user, password)
		want := http.StatusOK
		if r.path == "/no-such-page" {
			want = http.StatusNotFound
		}
		if code != want {
			t.Errorf("%s %s with credentials: %d %.200q, want %d", r.method, r.path, code, body, want)
		}
	}
	if n := reloads.Load(); n != 1 {
		t.Errorf("authorised POST /-/reload: %d reloads, want 1", n)
	}
	// exporter-toolkit reads the file again for every request: a file broken
	// while running fails closed (500, nothing served), and a fixed one serves again.
	good, err := os.ReadFile(webCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(webCfg, append(good, []byte("basic_auth_users: [\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, auth := range [][2]string{{"", ""}, {user, password}} {
		if code, body := do("GET", "/metrics", auth[0], auth[1]); code == http.StatusOK || strings.Contains(body, "go_goroutines") {
			t.Errorf("GET /metrics (user %q) with a broken web config: %d, want a refusal", auth[0], code)
		}
	}
	if err := os.WriteFile(webCfg, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _ := do("GET", "/metrics", user, password); code != http.StatusOK {
		t.Errorf("GET /metrics after the web config was fixed: %d", code)
	}

	// Plain HTTP to the TLS port gets no page.
	resp, err := http.Get("http://" + addr + "/metrics")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(b), "go_goroutines") {
			t.Errorf("plain HTTP to the TLS server served /metrics: %d", resp.StatusCode)
		}
	}
}

// TestReloadOnlyByPost: /-/reload changes state, so no method but POST may
// trigger it.
func TestReloadOnlyByPost(t *testing.T) {
	var reloads atomic.Int32
	h := New(Options{NodeName: "a", Gatherer: prometheus.NewRegistry(), Reload: func() error { reloads.Add(1); return nil }}, promslog.NewNopLogger())
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		rec := httptestRecorder(h, m, "/-/reload")
		if rec != http.StatusMethodNotAllowed {
			t.Errorf("%s /-/reload: %d, want 405", m, rec)
		}
	}
	if n := reloads.Load(); n != 0 {
		t.Fatalf("%d reloads from methods other than POST", n)
	}
	if code := httptestRecorder(h, http.MethodPost, "/-/reload"); code != http.StatusOK || reloads.Load() != 1 {
		t.Errorf("POST /-/reload: %d, %d reloads; want 200 and 1", code, reloads.Load())
	}
	h.opts.Reload = func() error { return errors.New("loading --config.file: line 3: field x not found") }
	if code := httptestRecorder(h, http.MethodPost, "/-/reload"); code != http.StatusInternalServerError {
		t.Errorf("POST /-/reload of a bad file: %d, want 500", code)
	}
}

func httptestRecorder(h http.Handler, method, path string) int {
	rw := &statusRecorder{header: http.Header{}}
	req, _ := http.NewRequest(method, path, nil)
	h.ServeHTTP(rw, req)
	return rw.code
}

type statusRecorder struct {
	header http.Header
	code   int
}

func (s *statusRecorder) Header() http.Header { return s.header }
func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return len(b), nil
}
func (s *statusRecorder) WriteHeader(code int) { s.code = code }

// TestSlowClientsAreCut holds many slow-loris connections on a real
// listener (headers trickled a byte at a time, and TLS handshakes never
// started): each is closed within the header timeout plus slack, not
// before it, and other clients are served all along. Headers past the
// limit get 431.
func TestSlowClientsAreCut(t *testing.T) {
	if d := defaultServerLimits(); d.readHeader <= 0 || d.read <= 2*time.Minute-time.Second || d.idle <= 0 || d.maxHeaderBytes <= 0 {
		t.Fatalf("default limits %+v: every bound must be set, and the read timeout must outlast a default 30s CPU profile", d)
	}
	const headerTimeout = 700 * time.Millisecond
	const slack = 3 * time.Second // scheduling on a loaded machine
	tune := func(h *Handler) {
		h.limits = serverLimits{readHeader: headerTimeout, read: 5 * time.Second, idle: 5 * time.Second, maxHeaderBytes: 8 << 10}
	}
	dir := t.TempDir()
	certFile, keyFile, _ := testutil.SelfSignedCert(t, dir)
	tlsCfg := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(tlsCfg, fmt.Appendf(nil, "tls_server_config:\n  cert_file: %s\n  key_file: %s\n", certFile, keyFile), 0o600); err != nil {
		t.Fatal(err)
	}
	plain := serve(t, Options{NodeName: "a"}, tune)
	withTLS := serve(t, Options{NodeName: "a", WebConfigFile: tlsCfg}, tune)

	type result struct {
		held time.Duration
		err  error
	}
	const n = 20
	results := make(chan result, 2*n)
	// Trickle: a request line, then one header byte every 100ms, forever.
	for range n {
		c, err := net.Dial("tcp", plain)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		go func() {
			if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
				return
			}
			for {
				time.Sleep(100 * time.Millisecond)
				if _, err := c.Write([]byte("a")); err != nil {
					return
				}
			}
		}()
		go func() {
			_, err := io.Copy(io.Discard, c) // returns when the server closes
			results <- result{time.Since(start), err}
		}()
	}
	// Stalled TLS: connect to the TLS port and never say hello.
	for range n {
		c, err := net.Dial("tcp", withTLS)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		go func() {
			_, err := io.Copy(io.Discard, c)
			results <- result{time.Since(start), err}
		}()
	}

	// Others are served while the slow ones are held.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + plain + "/-/healthy")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a normal client beside %d slow ones: %v %v", 2*n, resp, err)
	}
	resp.Body.Close()

	for range 2 * n {
		select {
		case r := <-results:
			if r.held < headerTimeout-50*time.Millisecond {
				t.Errorf("slow connection closed after %s, before the %s header timeout: closed for another reason (%v)", r.held, headerTimeout, r.err)
			}
			if r.held > headerTimeout+slack {
				t.Errorf("slow connection held for %s, want at most %s + %s", r.held, headerTimeout, slack)
			}
		case <-time.After(headerTimeout + slack + 5*time.Second):
			t.Fatalf("a slow connection is still open after %s", headerTimeout+slack+5*time.Second)
		}
	}

	// A kept-alive connection is closed once idle.
	c, err := net.Dial("tcp", plain)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("keep-alive request: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5*time.Second + slack + 5*time.Second))
	if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("idle keep-alive connection: %v after %s, want it closed by the server", err, time.Since(start))
	}

	// Oversized headers: 431, and the server goes on.
	req, _ := http.NewRequest(http.MethodGet, "http://"+plain+"/-/healthy", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 64<<10))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64KiB header against an 8KiB limit: %d, want 431", resp.StatusCode)
	}
}
