// Package handover hands a leaving replica's unsent samples to a live peer
// instead of losing them with its storage. See docs/handover.md.
//
// Leaving side (Leave): once the remote-write queues have stopped, the
// replica streams its WAL (checkpoint and segments) and its remote-write
// progress files to a participant peer over HTTP (POST /api/v1/handover,
// the format in protocol.go). Only once the peer has acknowledged does it
// mark its own progress as sent; otherwise nothing of its storage changes.
//
// Receiving side (ServeHTTP, Run): the peer stores the transfer durably
// under <storage.path>/handover/<id>/ before acknowledging, announces that
// it carries the leaver's backlog in its gossiped metadata
// (cluster.Carry), and sends it with a remotewrite.Manager of its own over
// the copy, one backlog at a time, with the progress files the leaver had:
// nothing acknowledged by the remote end before is sent again. When every
// queue has delivered it, the backlog is removed and no longer announced.
//
// Ordering (Tracker): the new owners of the leaver's targets hold their
// own samples until the leaver's last fence is acknowledged; a leaver that
// is gone no longer releases them by leaving while a carrier announces its
// backlog (placement.Backlogs).
package handover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/config"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/placement"
)

// Defaults for Options.
const (
	DefaultTimeout    = 60 * time.Second
	DefaultMaxBytes   = 2 << 30
	DefaultMaxPending = 3
	// announceWait bounds the leaver's wait to see its receiver announce
	// the backlog before it leaves the cluster.
	announceWait = 5 * time.Second
)

// Cluster is this node's membership (*cluster.Node).
type Cluster interface {
	Self() cluster.Peer
	Peers() []cluster.Peer
	Departed() []cluster.Departure
	Subscribe() (<-chan struct{}, func())
	SetCarried([]cluster.Carry) error
}

// Options configures a Service. Zero values take the defaults.
type Options struct {
	// Dir is <storage.path>/handover.
	Dir string
	// Timeout bounds a leaver's whole hand-over (--cluster.handover.timeout).
	Timeout time.Duration
	// MaxBytes bounds one transfer and what a receiver keeps undelivered
	// (--cluster.handover.max-bytes).
	MaxBytes int64
	// MaxPending bounds how many backlogs a receiver keeps undelivered.
	MaxPending int
	// LeaverWait is how long a peer that left with unacknowledged samples
	// that no node announces is still waited for by holds (Tracker):
	// --cluster.handoff-timeout, which ends those holds anyway (0:
	// DefaultLeaverWait).
	LeaverWait time.Duration
	// Client and Scheme reach peers (authenticated like the peer fan-out).
	Client *http.Client
	Scheme string
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.Scheme == "" {
		o.Scheme = "http"
	}
	return o
}

// Service is both sides of the hand-over on one node.
type Service struct {
	opts    Options
	cl      Cluster
	logger  *slog.Logger
	metrics *metrics
	store   *Store
	reg     prometheus.Registerer
	tracker *Tracker

	recvMu    sync.Mutex // one incoming transfer at a time
	cfgMu     sync.Mutex
	cfg       *config.Config
	wake      chan struct{} // a transfer was stored
	cfgCh     chan struct{} // ApplyConfig was called
	leaving   chan struct{} // closed by Leave: accept nothing more
	leaveOnce sync.Once

	runMu     sync.Mutex
	runCancel context.CancelFunc
	runDone   chan struct{}

	statusMu sync.Mutex
	last     *TransferStatus
	sending  *TransferStatus

	holdsMu sync.Mutex
	holds   HoldKeeper
	acked   map[string]uint64 // backlog id: its leaver's last fence delivered
}

// HoldKeeper keeps a departed node's holds (Header.HandOff) on the queues
// that send its backlog: cmd/shoal wires placement.Coordinator.CarryHolds.
type HoldKeeper func(state []byte, q placement.HoldQueues) (CarriedHolds, error)

// CarriedHolds are the holds kept on a backlog's queues
// (*placement.CarriedHolds).
type CarriedHolds interface {
	// Step releases what may go and returns how many holds remain.
	Step() int
	// AckedSeq is the leaver's last fence whose samples are delivered.
	AckedSeq() uint64
	// Close releases every hold left.
	Close()
}

// SetHolds sets how backlogs keep their leavers' holds; call it before
// Run. Without it a backlog is sent without them.
func (s *Service) SetHolds(k HoldKeeper) {
	s.holdsMu.Lock()
	s.holds = k
	s.holdsMu.Unlock()
}

// New opens the store in opts.Dir and announces the backlogs it holds, so
// call it before the cluster node starts: a restarted receiver must never
// look as if it had delivered them. reg gets the shoal_handover_* metrics,
// and the remote-write metrics of the backlog queues prefixed with
// shoal_handover_.
func New(opts Options, cl Cluster, logger *slog.Logger, reg prometheus.Registerer) (*Service, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts = opts.withDefaults()
	st, err := OpenStore(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("handover: opening %s: %w", opts.Dir, err)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Service{
		opts: opts, cl: cl, logger: logger, metrics: m, store: st, reg: reg,
		tracker: NewTracker(cl, opts.LeaverWait, 0),
		wake:    make(chan struct{}, 1),
		cfgCh:   make(chan struct{}, 1),
		leaving: make(chan struct{}),
		acked:   map[string]uint64{},
	}
	if err := s.announce(); err != nil {
		m.unregister()
		return nil, err
	}
	s.takeUpHandedOver()
	return s, nil
}

// Close unregisters the metrics.
func (s *Service) Close() { s.metrics.unregister() }

// Tracker is what placement asks whether a departed peer's backlog is
// still being delivered elsewhere.
func (s *Service) Tracker() *Tracker { return s.tracker }

// ApplyConfig gives the remote_write configuration the backlogs are sent
// with (the same queue names as on the leaver).
func (s *Service) ApplyConfig(cfg *config.Config) {
	s.cfgMu.Lock()
	s.cfg = cfg
	s.cfgMu.Unlock()
	select {
	case s.cfgCh <- struct{}{}:
	default:
	}
}

func (s *Service) config() *config.Config {
	s.cfgMu.Lock()
	defer s.cfgMu.Unlock()
	return s.cfg
}

func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// announce publishes the stored backlogs as carried and updates the gauges.
func (s *Service) announce() error {
	pend, err := s.store.Pending()
	if err != nil {
		return err
	}
	var carries []cluster.Carry
	var local []placement.Departed
	var bytes int64
	s.holdsMu.Lock()
	for _, b := range pend {
		start := time.UnixMilli(b.Start)
		acked := s.acked[b.ID]
		carries = append(carries, cluster.Carry{Of: cluster.CarryKey(b.Node, start), Seq: b.Seq, Acked: acked})
		local = append(local, placement.Departed{Node: b.Node, Start: start, Seq: b.Seq, Acked: acked})
		bytes += b.Bytes
	}
	s.holdsMu.Unlock()
	s.tracker.setLocal(local)
	s.metrics.pending.Set(float64(len(pend)))
	s.metrics.pendingBytes.Set(float64(bytes))
	if s.cl == nil {
		return nil
	}
	return s.cl.SetCarried(carries)
}

// answer is the JSON a receiver answers a transfer with.
type answer struct {
	Status string `json:"status"` // "stored", "duplicate" or "error"
	ID     string `json:"id,omitempty"`
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ServeHTTP receives one transfer (POST /api/v1/handover).
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeAnswer(w, http.StatusMethodNotAllowed, answer{Status: "error", Error: "POST only"})
		return
	}
	if !s.recvMu.TryLock() {
		s.refuse(w, http.StatusServiceUnavailable, ReasonBusy, errors.New("another transfer is being received"), "")
		return
	}
	defer s.recvMu.Unlock()
	if err := s.accepting(); err != nil {
		s.refuse(w, http.StatusServiceUnavailable, ReasonNotReady, err, "")
		return
	}
	s.metrics.inFlight.WithLabelValues("received").Inc()
	defer s.metrics.inFlight.WithLabelValues("received").Dec()
	start := time.Now()
	// A sender that stalls must not keep the one receiving slot (and a
	// Leave waiting for it) beyond this node's own bound.
	_ = http.NewResponseController(w).SetReadDeadline(start.Add(s.opts.Timeout))
	b, dup, err := s.store.receive(r.Body, s.opts.MaxBytes, s.admit)
	if err != nil {
		s.refuseErr(w, err, b.ID)
		return
	}
	if dup {
		s.logger.Info("Backlog transfer received again; already stored or delivered", "id", b.ID, "from", b.Node)
		writeAnswer(w, http.StatusOK, answer{Status: "duplicate", ID: b.ID})
		return
	}
	if err := s.announce(); err != nil {
		// Unannounced, the backlog could be sent after the new owners'
		// samples: refuse it; the leaver keeps it or tries another peer.
		os.RemoveAll(b.Dir)
		_ = s.announce()
		s.refuse(w, http.StatusServiceUnavailable, ReasonBusy, err, b.ID)
		return
	}
	s.metrics.bytes.WithLabelValues("received").Add(float64(b.Bytes))
	s.metrics.samples.WithLabelValues("received").Add(float64(b.Samples))
	s.metrics.transfers.WithLabelValues("received").Inc()
	s.logger.Info("Backlog taken over from a departing replica; stored, announced, and sent from here",
		"id", b.ID, "from", b.Node, "bytes", b.Bytes, "samples", b.Samples, "files", b.Files, "duration", time.Since(start))
	writeAnswer(w, http.StatusOK, answer{Status: "stored", ID: b.ID})
	s.poke()
}

// accepting says why this node takes no transfer now, if it does not.
func (s *Service) accepting() error {
	select {
	case <-s.leaving:
		return errors.New("this replica is shutting down")
	default:
	}
	if s.cl != nil && s.cl.Self().State != cluster.Participant {
		return fmt.Errorf("this replica is a %s, not a participant", s.cl.Self().State)
	}
	return nil
}

// admit refuses a transfer that would exceed the receiver's bounds.
func (s *Service) admit(h Header) error {
	pend, err := s.store.Pending()
	if err != nil {
		return err
	}
	if len(pend) >= s.opts.MaxPending {
		return errBusy{fmt.Errorf("already %d backlogs undelivered here", len(pend))}
	}
	total := h.Bytes
	for _, b := range pend {
		total += b.Bytes
	}
	if total > s.opts.MaxBytes {
		return errBusy{fmt.Errorf("%d bytes of backlogs undelivered here with this one, at most %d", total, s.opts.MaxBytes)}
	}
	return nil
}

type errBusy struct{ error }

func (s *Service) refuseErr(w http.ResponseWriter, err error, id string) {
	var ve VersionError
	var tl *TooLargeError
	var eb errBusy
	switch {
	case errors.As(err, &ve):
		s.refuse(w, http.StatusBadRequest, ReasonVersion, err, id)
	case errors.As(err, &tl):
		s.refuse(w, http.StatusRequestEntityTooLarge, ReasonTooLarge, err, id)
	case errors.As(err, &eb):
		s.refuse(w, http.StatusInsufficientStorage, ReasonBusy, err, id)
	case errors.Is(err, ErrInProgress):
		s.refuse(w, http.StatusConflict, ReasonBusy, err, id)
	case errors.Is(err, ErrTorn):
		s.refuse(w, http.StatusBadRequest, ReasonTorn, err, id)
	case isLocal(err):
		s.refuse(w, http.StatusInternalServerError, ReasonLocal, err, id)
	default:
		s.refuse(w, http.StatusBadRequest, ReasonMalformed, err, id)
	}
}

func isLocal(err error) bool {
	var pe *os.PathError
	var le *os.LinkError
	return errors.As(err, &pe) || errors.As(err, &le)
}

func (s *Service) refuse(w http.ResponseWriter, code int, reason string, err error, id string) {
	s.metrics.failures.WithLabelValues("received", reason).Inc()
	s.logger.Warn("Refused a backlog transfer; the sender keeps it or tries another peer", "id", id, "reason", reason, "err", err)
	writeAnswer(w, code, answer{Status: "error", ID: id, Error: err.Error(), Reason: reason})
}

func writeAnswer(w http.ResponseWriter, code int, a answer) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(a)
}

// backlogDirs are the subdirectories a backlog consists of.
func backlogDirs(root string) (walDir, progressDir string) {
	return filepath.Join(root, "wal"), filepath.Join(root, "remotewrite")
}
