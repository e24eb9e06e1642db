package remotewrite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// ReloadFlushDeadline bounds how long ApplyConfig lets a removed or changed
// queue send what it has read before stopping it. Whatever is not sent is
// not lost: the queue's progress file still points before it.
var ReloadFlushDeadline = 5 * time.Second

// Defaults applied to zero or invalid queue_config values.
const (
	defaultMaxSamplesPerSend = 2000
	defaultBatchSendDeadline = 5 * time.Second
	defaultMinBackoff        = 30 * time.Millisecond
	defaultMaxBackoff        = 5 * time.Second
)

// Manager runs one queue per remote_write entry of the configuration. Each
// queue reads the WAL in walDir on its own and keeps its progress in
// progressDir. The zero value is not usable; call NewManager.
type Manager struct {
	walDir, progressDir string
	logger              *slog.Logger
	metrics             *metrics

	mtx     sync.Mutex // serialises ApplyConfig, Run start and Stop
	queues  map[string]*queue
	runCtx  context.Context
	stopped bool
	stopCh  chan struct{}

	// snapshot is the current set of queues, for Notify and PendingSegment,
	// which must never wait for a reload in progress.
	snapshot atomic.Pointer[[]*queue]
	// configured is set by the first successful ApplyConfig. Before that the
	// Manager cannot know what queues will need, so it keeps the whole WAL.
	configured atomic.Bool
	// handoff holds the hand-off requests (handoff.go).
	handoff handoff
	// separateBy is the label whose values never share a request (SeparateBy).
	separateBy string
	// local is the WAL the queues read, in this process (AttachWAL); nil
	// when there is none to ask.
	local LocalWAL
}

// SeparateBy makes every request carry series of one value of the label
// only. With a replication factor above 1 each owner labels a target's
// series with its rank, and an HA-deduplicating receiver (the Mimir/Cortex
// HA tracker) accepts or refuses a whole request by the replica label of its
// first series: a request mixing ranks would lose the samples of the other
// rank. Call it before the first ApplyConfig; "" (the default) splits nothing.
func (m *Manager) SeparateBy(label string) {
	m.mtx.Lock()
	defer m.mtx.Unlock()
	m.separateBy = label
}

// LocalWAL is the WAL the queues read, open in this process (wal.Storage).
// A queue asks it for a new series' labels and, where its final labels are
// the same, keeps the WAL's label set instead of a copy (one label set per
// series in the process however many queues send it); and, when it has
// read to the end of the live segment, whether the writer has moved on,
// without a system call.
type LocalWAL interface {
	SeriesLabels(ref chunks.HeadSeriesRef) (labels.Labels, bool)
	LiveSegment() int
}

// AttachWAL makes queues created from now on ask w (see LocalWAL). Call it
// before the first ApplyConfig; without it each queue keeps its own copy of
// every series' labels and looks for the next segment's file.
func (m *Manager) AttachWAL(w LocalWAL) {
	m.mtx.Lock()
	defer m.mtx.Unlock()
	m.local = w
}

// NewManager returns a Manager for the WAL in walDir that keeps progress files
// in progressDir. A nil logger discards logs; a nil reg registers nothing.
// It fails when its metrics cannot be registered with reg; Close unregisters
// them.
func NewManager(walDir, progressDir string, logger *slog.Logger, reg prometheus.Registerer) (*Manager, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	metrics, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		walDir:      walDir,
		progressDir: progressDir,
		logger:      logger,
		metrics:     metrics,
		queues:      map[string]*queue{},
		stopCh:      make(chan struct{}),
	}
	m.snapshot.Store(&[]*queue{})
	return m, nil
}

// spec is everything a queue is built from. Two equal specs mean the queue
// can keep running across a reload.
type spec struct {
	name        string
	redactedURL string
	rw          *config.RemoteWriteConfig
	external    labels.Labels
	settings    settings
	opts        QueueOptions // shoal's own settings (policy.go)
}

func (s *spec) equal(o *spec) bool {
	return s.name == o.name && labels.Equal(s.external, o.external) && reflect.DeepEqual(s.rw, o.rw) && s.opts == o.opts
}

// QueueName returns the identity of the queue for a remote_write entry: its
// name, or a stable hash of its URL when it has none. Characters that are
// unsafe in a file name are replaced by '_'.
func QueueName(rw *config.RemoteWriteConfig) string {
	name := rw.Name
	if name == "" && rw.URL != nil {
		sum := sha256.Sum256([]byte(rw.URL.String()))
		name = hex.EncodeToString(sum[:])[:8]
	}
	b := []byte(name)
	for i, c := range b {
		ok := c == '-' || c == '_' || (c == '.' && i > 0) ||
			(c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}

func newSpec(rw *config.RemoteWriteConfig, external labels.Labels) (*spec, error) {
	if rw.URL == nil || rw.URL.URL == nil {
		return nil, errors.New("url is missing")
	}
	if m := rw.ProtobufMessage; m != "" && m != remoteapi.WriteV1MessageType && m != remoteapi.WriteV2MessageType {
		return nil, fmt.Errorf("protobuf_message %q is not supported, only %q or %q", m, remoteapi.WriteV1MessageType, remoteapi.WriteV2MessageType)
	}
	qc := rw.QueueConfig
	s := settings{
		capacity:       qc.Capacity,
		minShards:      qc.MinShards,
		maxShards:      qc.MaxShards,
		maxPerSend:     qc.MaxSamplesPerSend,
		deadline:       time.Duration(qc.BatchSendDeadline),
		minBackoff:     time.Duration(qc.MinBackoff),
		maxBackoff:     time.Duration(qc.MaxBackoff),
		sendExemplars:  rw.SendExemplars,
		sendHistograms: rw.SendNativeHistograms,
		sendMetadata:   rw.MetadataConfig.Send,
		v2:             rw.ProtobufMessage == remoteapi.WriteV2MessageType,
		external:       nonEmpty(external),
		relabel:        rw.WriteRelabelConfigs,
	}
	if s.maxPerSend <= 0 {
		s.maxPerSend = defaultMaxSamplesPerSend
	}
	if s.capacity <= 0 {
		s.capacity = s.maxPerSend
	}
	if s.maxShards <= 0 {
		s.maxShards = 1
	}
	s.minShards = min(max(s.minShards, 1), s.maxShards)
	if s.deadline <= 0 {
		s.deadline = defaultBatchSendDeadline
	}
	if s.minBackoff <= 0 {
		s.minBackoff = defaultMinBackoff
	}
	if s.maxBackoff <= 0 {
		s.maxBackoff = defaultMaxBackoff
	}
	s.maxBackoff = max(s.maxBackoff, s.minBackoff)
	return &spec{
		name:        QueueName(rw),
		redactedURL: rw.URL.Redacted(),
		rw:          rw,
		external:    external,
		settings:    s,
	}, nil
}

func newClient(sp *spec) (remote.WriteClient, error) {
	rw := sp.rw
	timeout := rw.RemoteTimeout
	if timeout <= 0 {
		timeout = model.Duration(30 * time.Second)
	}
	c, err := remote.NewWriteClient(sp.name, &remote.ClientConfig{
		URL:              rw.URL,
		Timeout:          timeout,
		HTTPClientConfig: rw.HTTPClientConfig,
		SigV4Config:      rw.SigV4Config,
		AzureADConfig:    rw.AzureADConfig,
		GoogleIAMConfig:  rw.GoogleIAMConfig,
		Headers:          rw.Headers,
		// 429 is always retried: dropping a rate-limited batch loses data
		// that is safely in the WAL, which shoal promises never to do.
		// (Prometheus' retry_on_http_429 defaults to false and is ignored.)
		RetryOnRateLimit: true,
		WriteProtoMsg:    protoMsg(rw.ProtobufMessage),
		RoundRobinDNS:    rw.RoundRobinDNS,
	})
	if err != nil {
		return nil, err
	}
	if hc, ok := c.(*remote.Client); ok && hc.Client != nil {
		hc.Client.Transport = responseInfoTransport{next: hc.Client.Transport}
		hc.Client.CheckRedirect = keepMethod(hc.Client.CheckRedirect)
	}
	return c, nil
}

// keepMethod follows a redirect only if the request stays a POST with its
// body (307, 308). Go's client turns a POST into a body-less GET on 301, 302
// and 303: the samples would go nowhere, and a receiver answering that GET
// with 400 would have them dropped as bad data. The 3xx itself is returned
// instead and retried like any status that is not the data's fault.
// follow_redirects: false (next) still stops every redirect.
func keepMethod(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if len(via) > 0 && req.Method != via[0].Method {
			return http.ErrUseLastResponse
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
}

// protoMsg is the configured Remote-Write message, 1.0 when unset.
func protoMsg(m remoteapi.WriteMessageType) remoteapi.WriteMessageType {
	if m == "" {
		return remoteapi.WriteV1MessageType
	}
	return m
}

// ApplyConfig makes the running queues match cfg.RemoteWriteConfigs. Queues
// whose entry (and the external labels) did not change keep running; removed
// or changed ones send what they have for up to ReloadFlushDeadline and stop;
// new ones start (if Run has been called). On error nothing changes.
func (m *Manager) ApplyConfig(cfg *config.Config) error {
	return m.ApplyConfigWithOptions(cfg, nil)
}

// ApplyConfigWithOptions is ApplyConfig with shoal's own settings of each
// remote_write entry, by queue name (QueueName); an entry without options
// gets the defaults. A changed option restarts that queue, as a changed
// entry does.
func (m *Manager) ApplyConfigWithOptions(cfg *config.Config, opts map[string]QueueOptions) error {
	if cfg == nil {
		return errors.New("remotewrite: nil config")
	}
	m.mtx.Lock()
	defer m.mtx.Unlock()
	if m.stopped {
		return errors.New("remotewrite: manager is stopped")
	}

	specs := map[string]*spec{}
	var order []string
	for i, rw := range cfg.RemoteWriteConfigs {
		if rw == nil {
			return fmt.Errorf("remote_write[%d]: empty entry", i)
		}
		sp, err := newSpec(rw, cfg.GlobalConfig.ExternalLabels)
		if err != nil {
			return fmt.Errorf("remote_write[%d]: %w", i, err)
		}
		sp.settings.separateBy = m.separateBy
		sp.opts = opts[sp.name]
		if err := sp.opts.validate(); err != nil {
			return fmt.Errorf("remote_write[%d] shoal options: %w", i, err)
		}
		if _, dup := specs[sp.name]; dup {
			return fmt.Errorf("remote_write[%d]: queue name %q is used twice (give the entries distinct names)", i, sp.name)
		}
		specs[sp.name] = sp
		order = append(order, sp.name)
	}
	// Build every new client before touching running queues, so that a bad
	// entry (say an unreadable CA file) leaves everything as it was.
	clients := map[string]remote.WriteClient{}
	for _, name := range order {
		if q, ok := m.queues[name]; ok && q.spec.equal(specs[name]) {
			continue
		}
		c, err := newClient(specs[name])
		if err != nil {
			return fmt.Errorf("remote_write %q: %w", name, err)
		}
		clients[name] = c
	}

	var wg sync.WaitGroup
	for name, q := range m.queues {
		if sp, ok := specs[name]; ok && q.spec.equal(sp) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			q.stop(ReloadFlushDeadline)
		}()
	}
	wg.Wait()
	for name, q := range m.queues {
		if sp, ok := specs[name]; ok && q.spec.equal(sp) {
			continue
		}
		delete(m.queues, name)
		m.metrics.deleteQueue(name)
		m.logger.Info("Remote-write queue stopped", "remote_name", name, "url", q.url)
	}
	var created []*queue
	for _, name := range order {
		if _, ok := m.queues[name]; ok {
			continue
		}
		q := newQueue(specs[name], m.walDir, m.progressDir, clients[name], m.metrics, m.logger)
		q.handoff = &m.handoff
		q.attach(m.local)
		m.queues[name] = q
		created = append(created, q)
	}
	// Publish before starting: a new queue reports segment 0 (keep
	// everything) until its reader has opened, and a truncation pass must
	// see that before the reader starts reading series. A pass already
	// past that question is handled by the reader (see walReader.open).
	m.publish()
	if m.runCtx != nil {
		for _, q := range created {
			q.start(m.runCtx)
		}
	}
	m.configured.Store(true)
	return nil
}

func (m *Manager) publish() {
	qs := make([]*queue, 0, len(m.queues))
	for _, q := range m.queues {
		qs = append(qs, q)
	}
	m.snapshot.Store(&qs)
}

// Run runs the queues until ctx is done or Stop is called. Cancelling ctx
// stops the queues at once (in-flight requests are abandoned and will be
// resent after a restart); Stop flushes first.
func (m *Manager) Run(ctx context.Context) error {
	m.mtx.Lock()
	if m.stopped {
		m.mtx.Unlock()
		return nil
	}
	if m.runCtx != nil {
		m.mtx.Unlock()
		return errors.New("remotewrite: Run called twice")
	}
	m.runCtx = ctx
	for _, q := range m.queues {
		q.start(ctx)
	}
	m.mtx.Unlock()

	select {
	case <-ctx.Done():
	case <-m.stopCh:
	}
	m.mtx.Lock()
	defer m.mtx.Unlock()
	for _, q := range m.queues {
		if q.started {
			<-q.done
		}
	}
	return nil
}

// Notify tells the queues that new WAL data was written, so they read it now
// rather than at their next poll. It never blocks.
func (m *Manager) Notify() {
	for _, q := range *m.snapshot.Load() {
		q.wake()
	}
}

// PendingSegment returns the lowest WAL segment that some queue has not
// durably acknowledged yet: the WAL must keep it and every later segment.
// ok is false when the configuration has no remote_write. Before the first
// ApplyConfig it returns (0, true): keep everything until the queues are known.
func (m *Manager) PendingSegment() (segment int, ok bool) {
	if !m.configured.Load() {
		return 0, true
	}
	qs := *m.snapshot.Load()
	if len(qs) == 0 {
		return 0, false
	}
	lowest := int64(-1)
	for _, q := range qs {
		if s := q.pendingSeg.Load(); lowest < 0 || s < lowest {
			lowest = s
		}
	}
	return int(lowest), true
}

// Stop makes every queue send what is in the WAL up to now, for at most
// flushDeadline, persists their progress and stops them. Run then returns.
// Stop is idempotent; ApplyConfig fails after it. The metrics stay
// registered (their final values can still be read) until Close.
func (m *Manager) Stop(flushDeadline time.Duration) {
	m.mtx.Lock()
	defer m.mtx.Unlock()
	if m.stopped {
		return
	}
	m.stopped = true
	var wg sync.WaitGroup
	for _, q := range m.queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q.stop(flushDeadline)
		}()
	}
	wg.Wait()
	close(m.stopCh)
}

// Close stops the Manager without a flush if Stop was not called, and
// unregisters its metrics, so that a new Manager can use the same registry.
func (m *Manager) Close() {
	m.Stop(0)
	m.mtx.Lock()
	defer m.mtx.Unlock()
	m.metrics.unregister()
}
