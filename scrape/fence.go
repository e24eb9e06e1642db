package scrape

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/storage"
	"github.com/shoal-dev/shoal/internal/promreg"
)

// UnitLabel is the internal target label by which the Fence recognises the
// hand-off unit of a scrape loop. The Filter sets it on every target it
// passes on; Prometheus keeps "__"-prefixed labels on the target but never
// puts them on samples. A relabel rule that drops it makes the target
// unfenceable (counted in shoal_handoff_unfenceable_appenders_total).
const UnitLabel = "__shoal_unit__"

// Unit is what is handed off between nodes: a target key and the rank this
// node scrapes it as (0 for the primary; always 0 with replication factor 1).
type Unit struct {
	Key  uint64
	Rank int
}

// String renders u as the value of UnitLabel.
func (u Unit) String() string { return fmt.Sprintf("%016x/%d", u.Key, u.Rank) }

// ParseUnit is the inverse of Unit.String.
func ParseUnit(s string) (Unit, error) {
	k, r, ok := strings.Cut(s, "/")
	if !ok {
		return Unit{}, fmt.Errorf("hand-off unit %q: want <key>/<rank>", s)
	}
	key, err := strconv.ParseUint(k, 16, 64)
	if err != nil {
		return Unit{}, fmt.Errorf("hand-off unit %q: %w", s, err)
	}
	rank, err := strconv.Atoi(r)
	if err != nil || rank < 0 {
		return Unit{}, fmt.Errorf("hand-off unit %q: bad rank", s)
	}
	return Unit{Key: key, Rank: rank}, nil
}

// Fence sits between Prometheus' scrape manager and the WAL. Once a unit is
// fenced, no appender of its scrape loops commits anything any more, whatever
// the scrape manager still does (a last scrape, end-of-run staleness
// markers): the node can then tell its peers that it will never again write a
// sample of the unit. The scrape manager must be created with
// Options.PassMetadataInContext, which is what puts the target into the
// appender's context.
type Fence struct {
	next  storage.AppendableV2
	meter atomic.Pointer[Meter]

	mu       sync.Mutex
	fenced   map[Unit]struct{}
	inflight map[Unit]int
	changed  chan struct{} // closed and replaced when an in-flight count drops

	refused     prometheus.Counter
	unfenceable prometheus.Counter
	metrics     *promreg.Group
}

// NewFence wraps next. Metrics are registered on reg (may be nil).
func NewFence(next storage.AppendableV2, reg prometheus.Registerer) (*Fence, error) {
	f := &Fence{
		next:     next,
		fenced:   map[Unit]struct{}{},
		inflight: map[Unit]int{},
		changed:  make(chan struct{}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_handoff_fenced_appends_total",
			Help: "Samples a scrape tried to append for a target this node had already handed off; none is written.",
		}),
		unfenceable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_handoff_unfenceable_appenders_total",
			Help: "Scrape appenders whose target carries no " + UnitLabel + " label (dropped by relabelling?), so that hand-off cannot fence them.",
		}),
	}
	g, err := promreg.Register(reg, f.refused, f.unfenceable)
	if err != nil {
		return nil, fmt.Errorf("scrape fence: %w", err)
	}
	f.metrics = g
	return f, nil
}

// Close unregisters the metrics.
func (f *Fence) Close() { f.metrics.Unregister() }

// Meter is told what every scrape of a unit appended: load-aware placement
// weighs targets by it. Measured runs inside the scrape's commit, so it
// must be quick and must not block.
type Meter interface {
	// Measured reports a committed scrape of u that appended samples
	// (series samples and report samples alike) at the target's scrape
	// interval.
	Measured(u Unit, samples int, interval time.Duration)
}

// SetMeter has every later commit of a unit's scrape reported to m (nil:
// none). Where the samples are counted is where they are written, so the
// weight is what this node really appends.
func (f *Fence) SetMeter(m Meter) {
	if m == nil {
		f.meter.Store(nil)
		return
	}
	f.meter.Store(&m)
}

// AppenderV2 implements storage.AppendableV2.
func (f *Fence) AppenderV2(ctx context.Context) storage.AppenderV2 {
	u, ok := unitOf(ctx)
	if !ok {
		if _, hasTarget := promscrape.TargetFromContext(ctx); hasTarget {
			f.unfenceable.Inc()
		}
		return f.next.AppenderV2(ctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, fenced := f.fenced[u]; fenced {
		return &fencedAppender{refused: f.refused}
	}
	f.inflight[u]++
	a := &trackedAppender{AppenderV2: f.next.AppenderV2(ctx), f: f, u: u}
	if m := f.meter.Load(); m != nil {
		a.meter, a.interval = *m, intervalOf(ctx)
	}
	return a
}

// intervalOf is the scrape interval of the target in ctx (0 if unknown).
func intervalOf(ctx context.Context) time.Duration {
	t, ok := promscrape.TargetFromContext(ctx)
	if !ok || t == nil {
		return 0
	}
	d, err := model.ParseDuration(t.GetValue(model.ScrapeIntervalLabel))
	if err != nil {
		return 0
	}
	return time.Duration(d)
}

func unitOf(ctx context.Context) (Unit, bool) {
	t, ok := promscrape.TargetFromContext(ctx)
	if !ok || t == nil {
		return Unit{}, false
	}
	v := t.GetValue(UnitLabel)
	if v == "" {
		return Unit{}, false
	}
	u, err := ParseUnit(v)
	return u, err == nil
}

// Fence stops every unit in units: appenders opened from now on commit
// nothing, and Fence returns once the appenders of those units that were
// already open have committed or rolled back (their samples were taken
// before the fence and are this node's to deliver). It returns ctx's error
// if ctx ends first; the units stay fenced.
func (f *Fence) Fence(ctx context.Context, units []Unit) error {
	f.mu.Lock()
	for _, u := range units {
		f.fenced[u] = struct{}{}
	}
	f.mu.Unlock()
	for {
		f.mu.Lock()
		busy := false
		for _, u := range units {
			if f.inflight[u] > 0 {
				busy = true
				break
			}
		}
		ch := f.changed
		f.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Unfence lets units append again: they were gained (back) and activated.
func (f *Fence) Unfence(units []Unit) {
	f.mu.Lock()
	for _, u := range units {
		delete(f.fenced, u)
	}
	f.mu.Unlock()
}

// Fenced reports whether u is fenced.
func (f *Fence) Fenced(u Unit) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.fenced[u]
	return ok
}

func (f *Fence) done(u Unit) {
	f.mu.Lock()
	if f.inflight[u]--; f.inflight[u] <= 0 {
		delete(f.inflight, u)
	}
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// trackedAppender counts as in flight until Commit or Rollback, and counts
// its samples for the meter.
type trackedAppender struct {
	storage.AppenderV2
	f        *Fence
	u        Unit
	once     sync.Once
	meter    Meter // nil: not measured
	interval time.Duration
	n        int
	failed   bool // the scrape's up sample is 0
}

func (a *trackedAppender) Append(ref storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AppendV2Options) (storage.SeriesRef, error) {
	a.n++
	// A failed scrape (a timeout on a starved machine) appends only its
	// report series: measured, it would publish a weight of a few
	// samples/s for a target of hundreds.
	if v == 0 && a.meter != nil && ls.Get(labels.MetricName) == "up" {
		a.failed = true
	}
	return a.AppenderV2.Append(ref, ls, st, t, v, h, fh, opts)
}

func (a *trackedAppender) Commit() error {
	defer a.once.Do(func() { a.f.done(a.u) })
	err := a.AppenderV2.Commit()
	if err == nil && a.meter != nil && a.n > 0 && !a.failed {
		a.meter.Measured(a.u, a.n, a.interval)
	}
	a.n, a.failed = 0, false
	return err
}

func (a *trackedAppender) Rollback() error {
	defer a.once.Do(func() { a.f.done(a.u) })
	return a.AppenderV2.Rollback()
}

// fencedAppender takes samples and writes none.
type fencedAppender struct {
	refused prometheus.Counter
	n       int
}

func (a *fencedAppender) Append(storage.SeriesRef, labels.Labels, int64, int64, float64, *histogram.Histogram, *histogram.FloatHistogram, storage.AppendV2Options) (storage.SeriesRef, error) {
	a.n++
	return 0, nil
}

func (a *fencedAppender) Commit() error {
	a.refused.Add(float64(a.n))
	a.n = 0
	return nil
}

func (a *fencedAppender) Rollback() error {
	a.n = 0
	return nil
}
