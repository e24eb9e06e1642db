package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	oklogrun "github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	config_util "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/version"
	toolkit "github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	promscrape "github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/storage"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/discoveryerr"
	"github.com/shoal-dev/shoal/handover"
	"github.com/shoal-dev/shoal/internal/promreg"
	"github.com/shoal-dev/shoal/internal/sdbuild"
	"github.com/shoal-dev/shoal/monitors"
	"github.com/shoal-dev/shoal/placement"
	"github.com/shoal-dev/shoal/remotewrite"
	"github.com/shoal-dev/shoal/ring"
	shoalscrape "github.com/shoal-dev/shoal/scrape"
	"github.com/shoal-dev/shoal/wal"
	"github.com/shoal-dev/shoal/web"
)

// scrapeReloadInterval is how often the scrape manager applies new target
// sets. Hand-off no longer depends on it (the fence stops a lost target at
// the appender), but a gained target starts at the next tick, so it is part
// of the hand-off gap.
const scrapeReloadInterval = 50 * time.Millisecond

// agent holds the live components so that reload, readiness and shutdown can reach them.
type agent struct {
	f      *flags
	logger *slog.Logger
	reg    *prometheus.Registry

	wal       *wal.Storage
	remote    *remotewrite.Manager
	scrape    *promscrape.Manager
	discovery *discovery.Manager
	filter    *shoalscrape.Filter
	node      *cluster.Node          // nil when clustering is disabled
	placement *placement.Coordinator // nil when clustering is disabled
	handover  *handover.Service      // nil without clustering or with --cluster.handover.timeout=0
	cfg       atomic.Pointer[config.Config]

	// targetDiscErrs holds kubernetes_sd_configs' refusals (see routeClientGoLogs).
	targetDiscErrs discoveryerr.Recorder

	configLoaded atomic.Bool
	walReplayed  atomic.Bool
	clusterUp    atomic.Bool
	terminating  atomic.Bool
	joined       joinStart
	stop         <-chan struct{} // closed when shutdown was requested

	reloadMu          sync.Mutex
	reloadSuccess     prometheus.Gauge
	reloadSuccessTime prometheus.Gauge
	reloadFailures    prometheus.Counter
	configHash        *prometheus.GaugeVec // shoal_config_hash

	replaying atomic.Pointer[string] // "segment k of n" while the WAL replays

	// monitorJobs is the last conversion of the monitor objects, merged
	// into every (re)load; nil without --kubernetes.monitors.
	monitorJobs atomic.Pointer[monitors.Result]
}

// run starts the agent and blocks until ctx is cancelled (SIGTERM in main),
// then shuts down gracefully: hand off, stop scraping, flush, leave.
func run(ctx context.Context, f *flags) error {
	return runAgent(ctx, f, prometheus.NewRegistry())
}

// runAgent is run with the registry every component registers its metrics
// in; docs/reference/metrics.md is generated from it (TestMetricsReferenceIsCurrent).
func runAgent(ctx context.Context, f *flags, reg *prometheus.Registry) error {
	logger := promslog.New(&f.log)
	logger.Info("Starting shoal", "version", version.Info(), "build_context", version.BuildContext(),
		"service_discoveries", sdbuild.Names())
	applyMemoryLimit(f.autoMemLimit, f.autoMemLimitRatio, logger)

	a := &agent{f: f, logger: logger, reg: reg, joined: joinStart{bound: f.handoffTimeout, logger: logger}}
	routeClientGoLogs(logger, &a.targetDiscErrs)
	a.reloadSuccess = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shoal_config_last_reload_successful", Help: "Whether the last configuration reload succeeded.",
	})
	a.reloadSuccessTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shoal_config_last_reload_success_timestamp_seconds", Help: "Time of the last successful configuration reload.",
	})
	a.reloadFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_config_reload_failures_total", Help: "Configuration reloads refused (SIGHUP or POST /-/reload); the previous configuration stayed in force.",
	})
	a.configHash = newConfigHashGauge()
	own, err := promreg.Register(reg,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versioncollector.NewCollector("shoal"),
		a.reloadSuccess, a.reloadSuccessTime, a.reloadFailures, a.configHash,
	)
	if err != nil {
		return fmt.Errorf("registering the agent's metrics: %w", err)
	}
	defer own.Unregister()

	// A config that does not load is fatal at start: there is nothing to run.
	cfg, rwOpts, err := loadConfigWithOptions(f.configFile, logger)
	if err != nil {
		return badConfig(err)
	}
	// The web configuration is checked now, so that a broken one is named
	// and exits 2 instead of surfacing as a server that did not start.
	if err := toolkit.Validate(f.webConfigFile); err != nil {
		return badConfig(fmt.Errorf("--web.config.file=%q: %w", f.webConfigFile, err))
	}
	if f.webClientConfigFile != "" {
		if _, _, err := config_util.LoadHTTPConfigFile(f.webClientConfigFile); err != nil {
			return badConfig(fmt.Errorf("--web.client-config.file=%q: %w", f.webClientConfigFile, redactYAMLValues(err)))
		}
	}

	if err := os.MkdirAll(f.storagePath, 0o755); err != nil {
		return fmt.Errorf("creating --storage.path: %w", err)
	}

	// The caller's cancellation starts the ordered shutdown below; the
	// components run on their own context so that they stop in that order
	// rather than all at once.
	stop := ctx.Done()
	a.stop = stop
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	// SIGHUP is caught from the start: config reloaders send it whenever a
	// ConfigMap changes, and its default action would kill the process
	// during a long WAL replay. One that arrives early is applied once running.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	// The web server and the cluster start before the WAL replays, so that
	// /-/healthy answers and peers see this node (as a viewer) during a long replay.
	scrapeView := &lateScrape{}

	if f.clusterEnabled {
		node, err := a.newClusterNode()
		if err != nil {
			return err
		}
		a.node = node
		// Before the node starts: a restarted receiver announces the
		// backlogs it still holds in its very first gossip.
		if err := a.newHandover(); err != nil {
			return err
		}
		if a.handover != nil {
			defer a.handover.Close()
		}
	}
	var g oklogrun.Group
	{
		webOpts := webOptions(a, f, scrapeView)
		h := web.New(webOpts, logger.With("component", "web"))
		if err := registerUtilization(reg, f.capacitySamples, h.SamplesPerSecond); err != nil {
			return err
		}
		webCtx, webCancel := context.WithCancel(ctx)
		var webErr error
		webDone := make(chan struct{}) // closed once Run returned; webErr is set by then
		go func() {
			defer close(webDone)
			webErr = h.Run(webCtx)
			if webErr != nil && webCtx.Err() == nil {
				logger.Error("HTTP server stopped; status page, APIs and /metrics are unavailable", "address", f.listenAddress, "err", webErr)
			}
		}()
		defer func() {
			webCancel()
			<-webDone
		}()
		// A server that cannot listen (address in use, bad TLS config) is
		// fatal at once, not after the replay.
		select {
		case <-webDone:
			return fmt.Errorf("HTTP server on %s: %w", f.listenAddress, webErr)
		case <-time.After(100 * time.Millisecond):
		}
	}

	if a.node != nil {
		if err := a.node.Start(ctx); err != nil {
			return fmt.Errorf("starting cluster membership: %w", err)
		}
		a.clusterUp.Store(true)
	}

	// Remote write is created before the WAL so that the WAL can ask it which
	// segments are still needed, and wake it on every commit.
	remote, err := remotewrite.NewManager(filepath.Join(f.storagePath, "wal"), filepath.Join(f.storagePath, "remotewrite"), logger.With("component", "remotewrite"), reg)
	if err != nil {
		return err
	}
	a.remote = remote
	if f.clusterEnabled && f.replicationFactor > 1 {
		// One rank per request, so that HA-deduplicating receivers work.
		a.remote.SeparateBy(f.replicaLabel)
	}
	walOpts := wal.DefaultOptions()
	walOpts.SegmentSize = int(f.walSegmentSize)
	walOpts.MaxAge = f.walMaxAge
	walOpts.MaxSize = int64(f.walMaxSize)
	walOpts.TruncateInterval = f.walTruncateEvery
	walOpts.OnCommit = a.remote.Notify
	walOpts.PendingSegment = a.remote.PendingSegment
	walOpts.OnReplay = func(k, n int) { s := fmt.Sprintf("segment %d of %d", k, n); a.replaying.Store(&s) }
	a.wal, err = wal.Open(filepath.Join(f.storagePath, "wal"), walOpts, logger.With("component", "wal"), reg)
	if err != nil {
		return fmt.Errorf("opening the WAL in %s: %w", f.storagePath, err)
	}
	defer func() {
		if err := a.wal.Close(); err != nil {
			logger.Error("Closing the WAL failed", "err", err)
		}
	}()
	a.walReplayed.Store(true)
	a.remote.AttachWAL(a.wal)

	// With clustering every appender goes through the hand-off fence.
	// PassMetadataInContext is what puts the target into the appender's
	// context (the fence reads its unit label there); it has no other effect
	// with AppenderV2.
	var (
		fence      *shoalscrape.Fence
		appendable storage.AppendableV2 = a.wal
	)
	if a.node != nil {
		if fence, err = shoalscrape.NewFence(a.wal, reg); err != nil {
			return err
		}
		defer fence.Close()
		appendable = fence
	}
	a.scrape, err = promscrape.NewManager(&promscrape.Options{
		AppendMetadata:          true,
		PassMetadataInContext:   a.node != nil,
		DiscoveryReloadInterval: model.Duration(scrapeReloadInterval),
	}, logger.With("component", "scrape manager"), nil, nil, appendable, reg)
	if err != nil {
		return fmt.Errorf("creating the scrape manager: %w", err)
	}
	scrapeView.m.Store(a.scrape)

	sdMetrics, err := discovery.CreateAndRegisterSDMetrics(reg)
	if err != nil {
		return fmt.Errorf("registering service discovery metrics: %w", err)
	}
	discoveryCtx, discoveryCancel := context.WithCancel(ctx)
	// A restarting node may see its targets before the previous owners have
	// stopped them: the ownership filter holds gained targets back until every
	// peer has fenced the new ring (see the placement package), so discovery's
	// timing does not matter for hand-off.
	a.discovery = discovery.NewManager(discoveryCtx, logger.With("component", "discovery manager"), reg, sdMetrics, discovery.Name("scrape"))
	if a.discovery == nil {
		discoveryCancel()
		return errors.New("creating the discovery manager failed")
	}

	// A short coalescing window: a ring change is on the hand-off's critical
	// path (a lost target is fenced, a gained one started, only after it).
	filterOpts := shoalscrape.FilterOptions{ReplicaLabel: f.replicaLabel, RingCoalesce: 25 * time.Millisecond}
	if a.node != nil {
		a.placement, err = placement.New(placement.Options{
			NodeName:          f.nodeName,
			Tokens:            f.tokens,
			ReplicationFactor: f.replicationFactor,
			HandoffDelay:      f.handoffDelay,
			HandoffTimeout:    f.handoffTimeout,
			TerminateGrace:    f.terminateGraceDeadline,
			Placement:         f.placement,
			Backlogs:          a.backlogs(),
			StatePath:         filepath.Join(f.storagePath, "handoff-state.json"),
		}, a.node, fence, a.wal, a.remote, logger.With("component", "placement"), reg)
		if err != nil {
			discoveryCancel()
			return err
		}
		defer a.placement.Close()
		a.keepCarriedHolds()
		filterOpts.Handoff = a.placement
		if f.placement == placement.ModeBounded {
			// Targets are weighed where their samples are appended.
			fence.SetMeter(a.placement)
		}
	}
	if a.filter, err = shoalscrape.NewFilter(filterOpts, a.scrape, logger.With("component", "ownership"), reg); err != nil {
		discoveryCancel()
		return err
	}
	defer a.filter.Close()
	if a.node != nil {
		// Until the placement's first view this node owns nothing; without
		// this call the filter would behave as a single agent and scrape
		// everything. From then on the filter follows the placement's view
		// (scrape.Handoff): placement never holds the filter.
		a.filter.SetRing(ring.New(nil, f.tokens), f.nodeName, f.replicationFactor, false)
	}

	if err := a.applyConfig(cfg, rwOpts); err != nil {
		discoveryCancel()
		return badConfig(fmt.Errorf("applying --config.file=%q: %w", f.configFile, err))
	}
	a.configLoaded.Store(true)
	a.reloadSuccess.Set(1)
	a.reloadSuccessTime.SetToCurrentTime()

	if a.node == nil {
		a.filter.SetRing(nil, f.nodeName, f.replicationFactor, true)
	}
	monWatcher, err := a.newMonitorWatcher()
	if err != nil {
		discoveryCancel()
		return badConfig(err)
	}
	// With clustering, followRing turns this node into a participant once the
	// cluster is ready (wait-for-size): until then it stays a viewer, off
	// every ring, so that no peer hands it targets it would not scrape.

	// Actors are interrupted in the order they are added: scraping stops
	// before remote write flushes, and membership leaves last.
	{
		cancelTerm := make(chan struct{})
		g.Add(func() error {
			select {
			case <-stop:
				logger.Info("Shutting down gracefully")
				a.becomeTerminating()
			case <-cancelTerm:
			}
			return nil
		}, func(error) { close(cancelTerm) })
	}
	{
		cancelHup := make(chan struct{})
		g.Add(func() error {
			for {
				select {
				case <-hup:
					_ = a.reload()
				case <-cancelHup:
					return nil
				}
			}
		}, func(error) { close(cancelHup) })
	}
	{
		g.Add(func() error {
			err := a.discovery.Run()
			logger.Info("Discovery manager stopped")
			return err
		}, func(error) { discoveryCancel() })
	}
	tsets := make(chan map[string][]*targetgroup.Group)
	{
		filterCtx, filterCancel := context.WithCancel(ctx)
		g.Add(func() error {
			return a.filter.Run(filterCtx, a.discovery.SyncCh(), tsets)
		}, func(error) { filterCancel() })
	}
	{
		g.Add(func() error {
			err := a.scrape.Run(tsets)
			logger.Info("Scrape manager stopped")
			return err
		}, func(error) {
			logger.Info("Stopping scrape manager...")
			a.scrape.Stop()
		})
	}
	{
		walCtx, walCancel := context.WithCancel(ctx)
		g.Add(func() error { return a.wal.Run(walCtx) }, func(error) { walCancel() })
	}
	{
		rwCtx, rwCancel := context.WithCancel(ctx)
		g.Add(func() error { return a.remote.Run(rwCtx) }, func(error) {
			logger.Info("Flushing remote write queues", "deadline", f.remoteFlushTimeout)
			a.remote.Stop(f.remoteFlushTimeout)
			a.handOver()
			rwCancel()
			a.remote.Close()
		})
	}
	if a.handover != nil {
		hoCtx, hoCancel := context.WithCancel(ctx)
		g.Add(func() error { a.handover.Run(hoCtx); return nil }, func(error) { hoCancel() })
	}
	if monWatcher != nil {
		monCtx, monCancel := context.WithCancel(ctx)
		g.Add(func() error { a.runMonitors(monCtx, monWatcher); return nil }, func(error) { monCancel() })
	}
	if a.node != nil {
		clusterCtx, clusterCancel := context.WithCancel(ctx)
		g.Add(func() error {
			a.placement.Run(clusterCtx)
			return nil
		}, func(error) {
			clusterCancel()
			// After the flush (an earlier actor's interrupt): the
			// final state carries what it delivered.
			a.placement.PublishAcked()
			if err := a.node.Leave(5 * time.Second); err != nil {
				logger.Warn("Leaving the cluster failed", "err", err)
			}
			a.node.Shutdown()
		})
	}

	err = g.Run()
	logger.Info("See you next time!")
	return err
}

// webOptions describes the live components to the web package.
func webOptions(a *agent, f *flags, scrapeView *lateScrape) web.Options {
	o := web.Options{
		ListenAddress: f.listenAddress,
		WebConfigFile: f.webConfigFile,
		Gatherer:      a.reg,
		Scrape:        scrapeView,
		Ownership:     ownershipView{a},
		Ring:          a.currentRing,
		Placement:     a.placementInfo,
		Ready:         a.ready,
		Reload:        a.reload,
		NodeName:      f.nodeName,
		Version:       fmt.Sprintf("shoal %s (revision %.12s, %s)", version.Version, version.GetRevision(), version.GoVersion),
	}
	if a.node != nil {
		o.Cluster = a.node
		o.ScrapeConfig = a.scrapeConfigStatus
	}
	o.DiscoveryErrors = a.discoveryErrors
	if f.monitors.enabled {
		o.Monitors = a.monitorsStatus
	}
	o.PeerClientConfigFile = f.webClientConfigFile // the status page asks peers with these credentials
	if a.handover != nil {
		o.Handover = a.handover
	}
	return o
}

// lateScrape answers for the scrape manager, which exists only once the WAL is replayed.
type lateScrape struct {
	m atomic.Pointer[promscrape.Manager]
}

func (l *lateScrape) TargetsActive() map[string][]*promscrape.Target {
	if m := l.m.Load(); m != nil {
		return m.TargetsActive()
	}
	return nil
}

// ownershipView answers for the filter, which exists only once the WAL is replayed.
type ownershipView struct{ a *agent }

func (o ownershipView) Targets() []shoalscrape.TargetInfo {
	// configLoaded is set after the filter exists, so checking it first is race-free.
	if !o.a.configLoaded.Load() {
		return nil
	}
	return o.a.filter.Targets()
}

func (o ownershipView) OwnedCounts() map[string]int {
	if !o.a.configLoaded.Load() {
		return nil
	}
	return o.a.filter.OwnedCounts()
}

func (a *agent) ready() (bool, string) {
	switch {
	case a.terminating.Load():
		return false, "shutting down"
	case a.node != nil && !a.clusterUp.Load():
		return false, "joining the cluster"
	case !a.walReplayed.Load():
		if p := a.replaying.Load(); p != nil {
			return false, "replaying WAL " + *p
		}
		return false, "WAL replay in progress"
	case !a.configLoaded.Load():
		return false, "applying the configuration"
	case a.node != nil && !a.node.Ready():
		if why := a.node.RememberedWait(); why != "" {
			return false, why
		}
		return false, fmt.Sprintf("waiting for %d cluster members (--cluster.wait-for-size) or --cluster.wait-timeout", a.f.waitForSize)
	case a.node != nil && a.node.Self().State != cluster.Participant:
		if a.placement != nil && a.placement.WaitsForHandedOver() {
			return false, "waiting for a peer to deliver the backlog the previous run handed over"
		}
		return false, "not yet a participant"
	}
	if a.node != nil {
		if started, waiting := a.gainedStarted(); !started {
			return false, fmt.Sprintf("starting %d gained targets once their previous owners have stopped them (at most --cluster.handoff-timeout)", waiting)
		}
	}
	return true, ""
}

// gainedStarted reports whether the targets this node gained on turning
// participant have started (joinStart), and how many wait now.
func (a *agent) gainedStarted() (started bool, waiting int) {
	s := startState{steppedAside: a.placement != nil && a.placement.ConfigStatus().SteppedAside}
	s.waiting, s.placed = a.filter.Waiting()
	return a.joined.started(s), s.waiting
}

func (a *agent) newClusterNode() (*cluster.Node, error) {
	f := a.f
	var key []byte
	if f.secretKeyFile != "" {
		b, err := os.ReadFile(f.secretKeyFile)
		if err != nil {
			return nil, badConfig(fmt.Errorf("reading --cluster.secret-key-file: %w", err))
		}
		key = trimKey(b)
		if n := len(key); n != 16 && n != 24 && n != 32 {
			// The length only: the key itself must never be printed.
			return nil, badConfig(fmt.Errorf("--cluster.secret-key-file=%q holds %d bytes; the gossip key must be 16, 24 or 32 bytes (AES-128, -192 or -256)", f.secretKeyFile, n))
		}
	}
	cfg := cluster.DefaultConfig()
	cfg.NodeName = f.nodeName
	cfg.ListenAddr = f.clusterListen
	cfg.AdvertiseAddr = f.clusterAdvertise
	cfg.Join = f.clusterJoin
	cfg.KubernetesLabelSelector = f.kubeLabelSelector
	cfg.KubernetesNamespace = f.kubeNamespace
	cfg.KubeNode = f.kubeNodeName
	cfg.Capabilities = placement.Capabilities(f.placement)
	if f.kubeconfig != "" && f.kubeLabelSelector != "" {
		kc, ns, err := kubeClientFromFile(f.kubeconfig)
		if err != nil {
			return nil, err
		}
		cfg.KubeClient = kc
		if cfg.KubernetesNamespace == "" {
			cfg.KubernetesNamespace = ns
		}
	}
	cfg.RejoinInterval = f.rejoinInterval
	cfg.ClusterName = f.clusterName
	cfg.SecretKey = key
	cfg.TLS = f.clusterTLS.config()
	cfg.WaitForSize = f.waitForSize
	cfg.WaitTimeout = f.waitTimeout
	// What the node knew of its cluster survives a restart (docs/membership.md).
	cfg.SnapshotPath = filepath.Join(f.storagePath, "cluster-members.json")
	cfg.HTTPAddr = advertisedHTTPAddr(f.listenAddress, f.clusterAdvertise)
	node, err := cluster.New(cfg, a.logger.With("component", "cluster"), a.reg)
	if err != nil {
		if cfg.TLS.Enabled() {
			// Most likely a TLS file that does not load: the operator's to fix.
			err = badConfig(err)
		}
		return nil, fmt.Errorf("configuring cluster membership: %w", err)
	}
	return node, nil
}

// clusterTLSFlags are the --cluster.tls-* flags.
type clusterTLSFlags struct {
	certFile, keyFile, caFile, serverName, minVersion string
}

func (c clusterTLSFlags) config() cluster.TLSConfig {
	v := uint16(tls.VersionTLS13)
	if c.minVersion == "TLS12" {
		v = tls.VersionTLS12
	}
	return cluster.TLSConfig{CAFile: c.caFile, CertFile: c.certFile, KeyFile: c.keyFile, ServerName: c.serverName, MinVersion: v}
}

// trimKey drops a trailing newline that editors and `echo` add to key files.
func trimKey(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// advertisedHTTPAddr is the HTTP address peers should use to reach this node:
// the listen address, with an unspecified host replaced by the gossip
// advertise host (or left for the cluster package to fill with the same
// address it advertises for gossip).
func advertisedHTTPAddr(listen, advertise string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		return listen
	}
	if advertise != "" {
		ah := advertise
		if h, _, err := net.SplitHostPort(advertise); err == nil {
			ah = h
		}
		return net.JoinHostPort(ah, port)
	}
	return net.JoinHostPort("", port)
}

// currentRing is the ring this node follows (nil without clustering).
func (a *agent) currentRing() *ring.Ring {
	if a.placement == nil {
		return nil
	}
	return a.placement.Ring()
}

// scrapeConfigStatus describes the scrape configuration agreement (zero
// before the placement exists).
func (a *agent) scrapeConfigStatus() web.ScrapeConfigStatus {
	// configLoaded is set after the placement exists: checking it first is race-free.
	if !a.configLoaded.Load() || a.placement == nil {
		return web.ScrapeConfigStatus{}
	}
	s := a.placement.ConfigStatus()
	return web.ScrapeConfigStatus{
		Current: s.Current, Previous: s.Previous, PlacingBy: s.PlacingBy, Rule: s.Rule,
		SteppedAside: s.SteppedAside, Drift: s.Drift,
	}
}

// placementInfo describes the placement in force for the status page.
func (a *agent) placementInfo() web.PlacementInfo {
	if a.placement == nil {
		return web.PlacementInfo{}
	}
	mode, loads, rate := a.placement.Loads()
	info := web.PlacementInfo{Mode: mode, WeighedRate: rate}
	for n, l := range loads {
		if info.Loads == nil {
			info.Loads = map[string]float64{}
		}
		info.Loads[n], info.Limit = l.Load, l.Limit
	}
	return info
}

// becomeTerminating hands this node's targets to its peers before anything
// stops: they are fenced at once, peers drop this node from the ring as soon
// as the state reaches them, and its last samples are flushed first.
func (a *agent) becomeTerminating() {
	a.terminating.Store(true)
	if a.placement == nil {
		a.filter.SetRing(nil, a.f.nodeName, a.f.replicationFactor, false)
		return
	}
	a.placement.Terminate()
}

func loadConfig(filename string, logger *slog.Logger) (*config.Config, error) {
	cfg, _, err := loadConfigWithOptions(filename, logger)
	return cfg, err
}

// loadConfigWithOptions loads the configuration and the shoal blocks of its
// remote_write entries (remotewrite.ExtractOptions), by queue name.
func loadConfigWithOptions(filename string, logger *slog.Logger) (*config.Config, map[string]remotewrite.QueueOptions, error) {
	cfg, opts, err := loadPrometheusConfig(filename, logger)
	if err != nil {
		return nil, nil, fmt.Errorf("loading --config.file=%q: %w", filename, redactYAMLValues(err))
	}
	applyScrapeDefaults(cfg)
	// scrape_config_files are read here, so that a broken one is caught now.
	if _, err := cfg.GetScrapeConfigs(); err != nil {
		return nil, nil, fmt.Errorf("loading scrape configs of --config.file=%q: %w", filename, redactYAMLValues(sdbuild.Explain(err)))
	}
	return cfg, remotewrite.OptionsByName(cfg, opts), nil
}

// loadPrometheusConfig is config.LoadFile in agent mode, with the shoal
// blocks taken out of the content first (Prometheus refuses unknown fields).
func loadPrometheusConfig(filename string, logger *slog.Logger) (*config.Config, []remotewrite.QueueOptions, error) {
	content, err := os.ReadFile(filename)
	if err != nil {
		return nil, nil, err
	}
	rest, opts, err := remotewrite.ExtractOptions(content)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := config.Load(string(rest), logger)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing YAML file %s: %w", filename, sdbuild.Explain(err))
	}
	// What config.LoadFile refuses in agent mode.
	switch {
	case len(cfg.AlertingConfig.AlertmanagerConfigs) > 0 || len(cfg.AlertingConfig.AlertRelabelConfigs) > 0:
		return nil, nil, errors.New("field alerting is not allowed in agent mode")
	case len(cfg.RuleFiles) > 0:
		return nil, nil, errors.New("field rule_files is not allowed in agent mode")
	case len(cfg.RemoteReadConfigs) > 0:
		return nil, nil, errors.New("field remote_read is not allowed in agent mode")
	}
	cfg.SetDirectory(filepath.Dir(filename))
	return cfg, opts, nil
}

// yamlQuotedValue is how YAML type errors quote the value they could not
// use: "line 5: cannot unmarshal !!str `hunter2` into config.plain".
var yamlQuotedValue = regexp.MustCompile("(cannot unmarshal !![a-z]+ )`[^`]*`")

// redactYAMLValues drops the values that YAML type errors quote: a password
// put where a map belongs would otherwise reach the log and the reload
// answer (YAML shortens only values longer than 10 bytes). The line and the
// expected type still say what is wrong.
func redactYAMLValues(err error) error {
	msg := err.Error()
	red := yamlQuotedValue.ReplaceAllString(msg, "${1}`<value hidden>`")
	if red == msg {
		return err
	}
	return errors.New(red)
}

func (a *agent) applyConfig(cfg *config.Config, rwOpts map[string]remotewrite.QueueOptions) error {
	scfgs, err := cfg.GetScrapeConfigs()
	if err != nil {
		return err
	}
	// Remote write goes first: it builds its clients (CA files, credentials)
	// and changes nothing when it fails, so a file it refuses leaves the
	// whole running configuration in place. The rest is validated at load.
	if err := a.remote.ApplyConfigWithOptions(cfg, rwOpts); err != nil {
		return fmt.Errorf("remote write: %w", err)
	}
	a.cfg.Store(cfg)
	if a.handover != nil {
		a.handover.ApplyConfig(cfg)
	}
	var errs []error
	if err := a.scrape.ApplyConfig(cfg); err != nil {
		errs = append(errs, fmt.Errorf("scrape: %w", err))
	}
	if err := a.filter.ApplyConfig(cfg); err != nil {
		errs = append(errs, fmt.Errorf("ownership filter: %w", err))
	}
	// runtime.gogc (default 75, or $GOGC) trades memory for GC work as in
	// Prometheus, which reads the same configuration section.
	if old := debug.SetGCPercent(cfg.Runtime.GoGC); old != cfg.Runtime.GoGC {
		a.logger.Info("Updated GOGC", "old", old, "new", cfg.Runtime.GoGC)
	}
	sd := make(map[string]discovery.Configs, len(scfgs))
	for _, sc := range scfgs {
		sd[sc.JobName] = sc.ServiceDiscoveryConfigs
	}
	if err := a.discovery.ApplyConfig(sd); err != nil {
		errs = append(errs, fmt.Errorf("discovery: %w", err))
	}
	if len(errs) == 0 {
		setConfigHash(a.configHash, cfg)
	}
	return errors.Join(errs...)
}

// reload reads the config file again; a file that does not load is refused
// and the running configuration stays.
func (a *agent) reload() error { return a.reloadFor("") }

// reloadFor is reload, logged with why when something other than a signal
// or the API asked for it.
func (a *agent) reloadFor(why string) error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	if !a.configLoaded.Load() {
		// The components do not exist yet; the file is read when they do.
		return errors.New("still starting: the configuration file is read once the WAL is replayed")
	}
	a.logger.Info("Loading configuration file", "filename", a.f.configFile, "reason", cmp.Or(why, "reload requested"))
	cfg, rwOpts, err := loadConfigWithOptions(a.f.configFile, a.logger)
	if err == nil {
		err = monitors.Merge(cfg, a.monitorJobs.Load(), a.absKubeconfig())
	}
	if err == nil {
		applyScrapeDefaults(cfg)
		err = a.applyConfig(cfg, rwOpts)
	}
	if err != nil {
		a.reloadSuccess.Set(0)
		a.reloadFailures.Inc()
		a.logger.Error("Configuration reload failed; the previous configuration stays in force", "err", err)
		return err
	}
	a.reloadSuccess.Set(1)
	a.reloadSuccessTime.SetToCurrentTime()
	a.logger.Info("Completed loading of configuration file", "filename", a.f.configFile)
	return nil
}
