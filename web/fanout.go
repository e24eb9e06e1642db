package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	config_util "github.com/prometheus/common/config"
	toolkit "github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"

	"github.com/shoal-dev/shoal/cluster"
)

// PeerError names a peer that could not be asked and why.
type PeerError struct {
	Name  string `json:"name"`
	Error string `json:"error"`
}

// peerClient builds the client used to ask peers: the HTTP client
// configuration file (Prometheus' common format, so that passwords and keys
// come from files) or a plain client. The scheme is https when this node's
// own server speaks TLS: every node runs the same web configuration.
func peerClient(opts Options) (*http.Client, string, error) {
	scheme := "http"
	if opts.WebConfigFile != "" {
		tlsOn, err := webConfigTLS(opts.WebConfigFile)
		if err != nil {
			return nil, "", err
		}
		if tlsOn {
			scheme = "https"
		}
	}
	if opts.PeerClient != nil {
		return opts.PeerClient, scheme, nil
	}
	if opts.PeerClientConfigFile == "" {
		return &http.Client{}, scheme, nil
	}
	cfg, _, err := config_util.LoadHTTPConfigFile(opts.PeerClientConfigFile)
	if err != nil {
		return nil, "", fmt.Errorf("loading the peer client configuration %q: %w", opts.PeerClientConfigFile, err)
	}
	c, err := config_util.NewClientFromConfig(*cfg, "shoal-peers")
	if err != nil {
		return nil, "", fmt.Errorf("peer client configuration %q: %w", opts.PeerClientConfigFile, err)
	}
	return c, scheme, nil
}

// webConfigTLS reports whether an exporter-toolkit web configuration turns TLS on.
func webConfigTLS(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("reading --web.config.file: %w", err)
	}
	var c toolkit.Config
	if err := yaml.Unmarshal(b, &c); err != nil {
		return false, fmt.Errorf("parsing --web.config.file %q: %w", path, err)
	}
	return c.TLSConfig.IsEnabled(), nil
}

// peerURL is the URL of path on a peer's advertised HTTP address.
func (h *Handler) peerURL(httpAddr, path, query string) (*url.URL, error) {
	if httpAddr == "" {
		return nil, errors.New("the peer advertises no HTTP address")
	}
	u := &url.URL{Scheme: h.scheme, Host: httpAddr, Path: path, RawQuery: query}
	if strings.Contains(httpAddr, "://") {
		base, err := url.Parse(httpAddr)
		if err != nil {
			return nil, err
		}
		u.Scheme, u.Host = base.Scheme, base.Host
	}
	return u, nil
}

// getPeer asks one peer for an API answer and decodes its data into v.
// The answer may be one another view fetched moments ago (see peerAnswers).
func (h *Handler) getPeer(ctx context.Context, p cluster.Peer, path, query string, v any) error {
	u, err := h.peerURL(p.HTTPAddr, path, query)
	if err != nil {
		return err
	}
	raw, err := h.answers.get(ctx, p.Name+" "+u.String(), h.opts.PeerAnswerTTL, func(ctx context.Context) ([]byte, error) {
		return h.fetchPeer(ctx, u)
	})
	if err != nil {
		return err
	}
	body := apiResponse{Data: v}
	if err := json.Unmarshal(raw, &body); err != nil {
		return fmt.Errorf("decoding GET %s: %w", u, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("GET %s: status %q: %s", u, body.Status, body.Error)
	}
	h.heard(p.Name)
	return nil
}

// fetchPeer GETs u and returns the body of a 200 answer. It waits for one
// of the PeerConcurrency tokens first; the wait counts in PeerTimeout.
func (h *Handler) fetchPeer(ctx context.Context, u *url.URL) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, h.opts.PeerTimeout)
	defer cancel()
	select {
	case h.peerSem <- struct{}{}:
		defer func() { <-h.peerSem }()
	case <-ctx.Done():
		return nil, fmt.Errorf("GET %s: waiting for a free peer request slot: %w", u, ctx.Err())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is said once, below
		}
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		hint := ""
		if resp.StatusCode == http.StatusUnauthorized {
			hint = " (set --web.client-config.file with credentials the peers accept)"
		}
		return nil, fmt.Errorf("GET %s answered %s%s", u, resp.Status, hint)
	}
	raw, err := io.ReadAll(http.MaxBytesReader(nil, resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("reading GET %s: %w", u, err)
	}
	return raw, nil
}

// peerAnswers shares peers' raw answers between views. Views asking the
// same peer for the same URL at the same time wait for one request, and an
// answer (or failure) younger than the TTL is reused: at 50 peers, ten
// people refreshing the cluster page cost each peer one request per TTL,
// not ten.
type peerAnswers struct {
	mu sync.Mutex
	m  map[string]*peerAnswer
}

type peerAnswer struct {
	done chan struct{} // closed when body and err are set
	body []byte
	err  error
	at   time.Time // when the answer came
}

// get returns the answer for key, calling fetch when there is none fresh
// or in flight. The fetch runs detached from the caller's cancellation, so
// that one view giving up does not fail the views sharing its request.
func (a *peerAnswers) get(ctx context.Context, key string, ttl time.Duration, fetch func(context.Context) ([]byte, error)) ([]byte, error) {
	a.mu.Lock()
	if a.m == nil {
		a.m = map[string]*peerAnswer{}
	}
	e := a.m[key]
	fresh := e != nil && (e.at.IsZero() || time.Since(e.at) < ttl)
	if !fresh {
		a.pruneLocked(ttl)
		e = &peerAnswer{done: make(chan struct{})}
		a.m[key] = e
		go func() {
			body, err := fetch(context.WithoutCancel(ctx))
			a.mu.Lock()
			e.body, e.err, e.at = body, err, time.Now()
			a.mu.Unlock()
			close(e.done)
		}()
	}
	a.mu.Unlock()
	select {
	case <-e.done:
		return e.body, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pruneLocked forgets answers older than ttl, so that peers that left do
// not stay in the map.
func (a *peerAnswers) pruneLocked(ttl time.Duration) {
	for k, e := range a.m {
		if !e.at.IsZero() && time.Since(e.at) >= ttl {
			delete(a.m, k)
		}
	}
}

func (h *Handler) heard(name string) {
	h.heardMu.Lock()
	h.lastHeard[name] = time.Now()
	h.heardMu.Unlock()
}

func (h *Handler) lastHeardFrom(name string) time.Time {
	h.heardMu.Lock()
	defer h.heardMu.Unlock()
	return h.lastHeard[name]
}

// fanOut calls ask for every peer but this node, concurrently, and returns
// the errors of those that failed, sorted by name. Each failure is logged.
func (h *Handler) fanOut(ctx context.Context, what string, ask func(ctx context.Context, p cluster.Peer) error) []PeerError {
	if h.opts.Cluster == nil {
		return []PeerError{}
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = []PeerError{}
	)
	// Workers, not a goroutine per peer: fetchPeer bounds the requests in
	// flight anyway, and a view at 1,000 peers needs no 1,000 goroutines.
	peers := make(chan cluster.Peer)
	for range h.opts.PeerConcurrency {
		wg.Go(func() {
			for p := range peers {
				err := ask(ctx, p)
				h.notePeer(p.Name, what, err)
				if err != nil {
					mu.Lock()
					errs = append(errs, PeerError{Name: p.Name, Error: err.Error()})
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range h.opts.Cluster.Peers() {
		if !p.Self {
			peers <- p
		}
	}
	close(peers)
	wg.Wait()
	sort.Slice(errs, func(i, j int) bool { return errs[i].Name < errs[j].Name })
	return errs
}

// notePeer logs a peer's failure once, when it starts or changes, and its
// recovery, rather than on every page view and API call.
func (h *Handler) notePeer(name, what string, err error) {
	h.heardMu.Lock()
	prev := h.peerErr[name]
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	h.peerErr[name] = msg
	h.heardMu.Unlock()
	switch {
	case msg != "" && msg != prev:
		h.logger.Warn("Could not ask a peer; the status page and cluster APIs show it as unreachable", "what", what, "peer", name, "err", err)
	case msg == "" && prev != "":
		h.logger.Info("A peer answers again", "peer", name)
	}
}

func peerErrorNames(errs []PeerError) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Name
	}
	return out
}
