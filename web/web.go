// Package web serves shoal's HTTP interface: the status page, the
// Prometheus-compatible and cluster APIs, self metrics, health, readiness and
// reload. It owns no state of its own: everything it shows comes from the
// interfaces in Options, which cmd/shoal fills with the live components.
package web

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	promscrape "github.com/prometheus/prometheus/scrape"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	toolkit "github.com/prometheus/exporter-toolkit/web"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/discoveryerr"
	"github.com/shoal-dev/shoal/ring"
	shoalscrape "github.com/shoal-dev/shoal/scrape"
)

// ActiveTargets is what the scrape manager knows about the targets it runs.
type ActiveTargets interface {
	TargetsActive() map[string][]*promscrape.Target
}

// Ownership lists every discovered target with its owners.
type Ownership interface {
	Targets() []shoalscrape.TargetInfo
	// OwnedCounts is how many discovered targets each node owns on the ring.
	OwnedCounts() map[string]int
}

// Membership is the cluster as seen by this node.
type Membership interface {
	Self() cluster.Peer
	Peers() []cluster.Peer
}

// Options configures the HTTP server. Zero values are safe where noted.
type Options struct {
	// ListenAddress is where the server listens, e.g. ":9940".
	ListenAddress string
	// WebConfigFile is an exporter-toolkit web config (TLS, basic auth); empty means plain HTTP.
	WebConfigFile string

	Gatherer  prometheus.Gatherer
	Scrape    ActiveTargets
	Ownership Ownership
	// Cluster is nil when clustering is disabled.
	Cluster Membership
	// Ring returns the ring in force, or nil when clustering is disabled.
	Ring func() *ring.Ring
	// Placement describes the load-aware placement in force; nil (or a
	// zero answer) with plain ring placement.
	Placement func() PlacementInfo
	// Ready reports whether the node serves traffic (config loaded, WAL replayed,
	// joined, wait-for-size met) and, if not, why.
	Ready func() (bool, string)
	// Reload applies the configuration file again and returns its error.
	Reload func() error
	// NodeName names this node on pages and in API answers.
	NodeName string
	// DiscoveryErrors returns the current peer and target discovery errors;
	// nil means none are tracked.
	DiscoveryErrors func() []discoveryerr.Error
	// ScrapeConfig returns which scrape configuration the cluster places
	// targets by and who runs another; nil without clustering.
	ScrapeConfig func() ScrapeConfigStatus
	// Monitors returns the jobs generated from Prometheus Operator objects
	// and the objects rejected; nil without --kubernetes.monitors.
	Monitors func() MonitorJobs
	// Version is shown on the status page.
	Version string
	// PeerTimeout bounds each request to a peer for the cluster-wide views (default 3s).
	PeerTimeout time.Duration
	// PeerConcurrency bounds how many requests to peers this node has in
	// flight at once, over every view together (default 16): a view at
	// hundreds of peers must not open hundreds of connections at once.
	PeerConcurrency int
	// PeerAnswerTTL is how long a peer's answer is reused by later views
	// (default 1s). Views that ask the same peer at the same time share one
	// request whatever the TTL.
	PeerAnswerTTL time.Duration
	// PeerClient is used to ask peers for their status and targets. Default:
	// built from PeerClientConfigFile, else a plain client.
	PeerClient *http.Client
	// PeerClientConfigFile is a Prometheus HTTP client configuration (TLS,
	// basic auth, authorization; secrets in files) for asking peers, needed
	// when WebConfigFile enables TLS or basic auth. Peers are asked over
	// https when WebConfigFile enables TLS.
	PeerClientConfigFile string
	// Handover receives backlogs of departing peers (POST
	// /api/v1/handover) and is shown on the status page; nil: none.
	Handover Handover
}

// Handler serves the routes; Server adds the listener.
type Handler struct {
	opts   Options
	logger *slog.Logger
	mux    *http.ServeMux
	start  time.Time
	meter  *loadMeter

	client  *http.Client
	scheme  string
	initErr error // a peer client configuration that does not load; Run returns it

	limits serverLimits

	heardMu   sync.Mutex
	lastHeard map[string]time.Time
	peerErr   map[string]string // the last error of each peer, to log changes only

	answers peerAnswers
	peerSem chan struct{} // one token per request to a peer in flight
}

// New builds the handler.
func New(opts Options, logger *slog.Logger) *Handler {
	if opts.PeerTimeout <= 0 {
		opts.PeerTimeout = 3 * time.Second
	}
	if opts.PeerConcurrency <= 0 {
		opts.PeerConcurrency = 16
	}
	if opts.PeerAnswerTTL <= 0 {
		opts.PeerAnswerTTL = time.Second
	}
	if opts.Ring == nil {
		opts.Ring = func() *ring.Ring { return nil }
	}
	if opts.Ready == nil {
		opts.Ready = func() (bool, string) { return true, "" }
	}
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.DefaultGatherer
	}
	h := &Handler{opts: opts, logger: logger, mux: http.NewServeMux(), start: time.Now(), lastHeard: map[string]time.Time{}, peerErr: map[string]string{}}
	h.limits = defaultServerLimits()
	h.peerSem = make(chan struct{}, opts.PeerConcurrency)
	h.meter = &loadMeter{g: opts.Gatherer}
	h.client, h.scheme, h.initErr = peerClient(opts)
	if h.initErr != nil {
		h.client, h.scheme = &http.Client{}, "http"
	}

	h.mux.HandleFunc("GET /{$}", h.statusPage)
	h.mux.HandleFunc("GET /cluster", h.clusterPage)
	h.mux.HandleFunc("GET /target", h.targetPage)
	h.mux.HandleFunc("GET /static/", h.static)
	h.mux.HandleFunc("GET /-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("shoal is healthy.\n"))
	})
	h.mux.HandleFunc("GET /-/ready", h.ready)
	// POST only: a reload changes state, so a link, a prefetch or a crawler
	// (all GET) must not trigger one. Other methods get 405.
	h.mux.HandleFunc("POST /-/reload", h.reload)
	h.mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError)}))
	h.mux.HandleFunc("GET /api/v1/targets", h.apiTargets)
	h.mux.HandleFunc("GET /api/v1/cluster/peers", h.apiPeers)
	h.mux.HandleFunc("GET /api/v1/cluster/targets", h.apiClusterTargets)
	h.mux.HandleFunc("GET /api/v1/cluster/explain", h.apiExplain)
	h.mux.HandleFunc("GET /api/v1/status/node", h.apiNodeStatus)
	if opts.Handover != nil {
		h.mux.Handle("POST /api/v1/handover", opts.Handover)
	}
	// Profiles, as Prometheus serves them, for the CPU and memory investigations
	// that benchmarks start. They sit behind the same TLS and basic auth as
	// every other route: exporter-toolkit wraps the whole handler in Run.
	h.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	h.mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	h.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	h.mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	h.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) ready(w http.ResponseWriter, _ *http.Request) {
	ok, why := h.opts.Ready()
	if !ok {
		http.Error(w, "shoal is not ready: "+why, http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("shoal is ready.\n"))
}

func (h *Handler) reload(w http.ResponseWriter, _ *http.Request) {
	if h.opts.Reload == nil {
		http.Error(w, "reload is not available", http.StatusNotImplemented)
		return
	}
	if err := h.opts.Reload(); err != nil {
		http.Error(w, "failed to reload config: "+err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte("config reloaded\n"))
}

// Run serves until ctx ends, then shuts the server down gracefully. It also
// samples the load figures, so that samples/s covers a steady window.
func (h *Handler) Run(ctx context.Context) error {
	if h.initErr != nil {
		return h.initErr
	}
	meterDone := make(chan struct{})
	meterCtx, meterCancel := context.WithCancel(ctx)
	defer func() {
		meterCancel()
		<-meterDone
	}()
	go func() {
		defer close(meterDone)
		h.meter.run(meterCtx)
	}()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: h.limits.readHeader,
		ReadTimeout:       h.limits.read,
		IdleTimeout:       h.limits.idle,
		MaxHeaderBytes:    h.limits.maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(h.logger.Handler(), slog.LevelError),
	}
	addrs := []string{h.opts.ListenAddress}
	systemd := false
	flags := &toolkit.FlagConfig{WebListenAddresses: &addrs, WebSystemdSocket: &systemd, WebConfigFile: &h.opts.WebConfigFile}

	errc := make(chan error, 1)
	go func() { errc <- toolkit.ListenAndServe(srv, flags, h.logger) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(shutdownCtx)
		if lerr := <-errc; lerr != nil && !errors.Is(lerr, http.ErrServerClosed) && err == nil {
			err = lerr
		}
		return err
	}
}

// serverLimits bound what one client can hold: a slow or stalled client is
// disconnected, not waited for.
type serverLimits struct {
	// readHeader bounds the TLS handshake and the request headers (slow loris).
	readHeader time.Duration
	// read bounds the whole request. net/http cancels a handler's context
	// when it passes, so it must exceed the longest handler: a CPU profile
	// (/debug/pprof/profile, 30s by default) or a trace.
	read time.Duration
	// idle bounds a kept-alive connection between requests.
	idle time.Duration
	// maxHeaderBytes bounds the request line and headers.
	maxHeaderBytes int
}

// defaultServerLimits are the limits of the HTTP server. There is no write
// timeout: profiles and traces stream for as long as asked.
func defaultServerLimits() serverLimits {
	return serverLimits{
		readHeader:     10 * time.Second,
		read:           2 * time.Minute,
		idle:           2 * time.Minute,
		maxHeaderBytes: 64 << 10,
	}
}
