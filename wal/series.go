package wal

import (
	"math"
	"sync"
	"unique"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// memSeries is what the WAL remembers about one series. The fields are
// ordered so that it fits the 96-byte size class (every byte here is paid
// per series).
type memSeries struct {
	ref  chunks.HeadSeriesRef
	lset labels.Labels
	hash uint64
	// next is another series whose labels have the same hash (a collision
	// or a forgotten series' successor), guarded by its hash stripe's lock.
	next *memSeries

	// Guarded by mu:
	// lastTs is the newest committed sample timestamp (math.MinInt64: none).
	lastTs int64
	// lastV is the value of the float sample at lastTs, to tell a harmless
	// repeat from a conflicting duplicate.
	lastV uint64
	// touched is the wall-clock time (ms) of the last commit with a sample of
	// this series, or of its creation; series GC compares against it.
	touched int64
	// meta is the last metadata written for the series (zero: none).
	meta unique.Handle[metadata.Metadata]
	// lastExemplar is used to drop repeated exemplars (nil: none yet).
	lastExemplar *exemplar.Exemplar

	mu sync.Mutex
	// pending counts the uncommitted appends that refer to this series. GC
	// never removes a series with pending > 0, so a commit never refers to a
	// forgotten series.
	pending int32
	// lastFloat tells whether the sample at lastTs is a float one (mu).
	lastFloat bool
	// dead is set by GC when the series is forgotten; a dead series is never
	// used again (a new one is created for the same labels). Guarded by mu.
	dead bool
	// logged is true once a series record for ref is in the WAL. Guarded by
	// Storage.commitMu (not mu): whoever commits the first sample writes it.
	logged bool
}

func newMemSeries(ref chunks.HeadSeriesRef, lset labels.Labels, hash uint64, touched int64) *memSeries {
	return &memSeries{ref: ref, lset: lset, hash: hash, lastTs: math.MinInt64, touched: touched}
}

// stripeSeries indexes series by labels hash and by ref, each striped to
// keep many scrape loops from contending on one lock.
//
// Lock order: a stripe lock may be held while taking a series' mu, never
// the other way round, and never two stripe locks at once.
type stripeSeries struct {
	mask   uint64
	hashes []hashStripe
	refs   *refIndex
}

type hashStripe struct {
	sync.RWMutex
	m map[uint64]*memSeries // the first of the series with that hash (see memSeries.next)
	// peak is the most entries m held since it was made: Go maps never
	// give their buckets back, so gc rebuilds m once it shrank well below.
	peak int
	_    [24]byte // keep neighbouring stripes off one cache line
}

const stripeCount = 4096 // power of two

func newStripeSeries() *stripeSeries {
	s := &stripeSeries{
		mask:   stripeCount - 1,
		hashes: make([]hashStripe, stripeCount),
		refs:   newRefIndex(),
	}
	for i := range s.hashes {
		s.hashes[i].m = map[uint64]*memSeries{}
	}
	return s
}

// getByRef returns the series with ref, dead or alive, or nil.
func (s *stripeSeries) getByRef(ref chunks.HeadSeriesRef) *memSeries {
	return s.refs.get(ref)
}

// getByLabels returns the live series with these labels, or nil.
func (s *stripeSeries) getByLabels(hash uint64, lset labels.Labels) *memSeries {
	st := &s.hashes[hash&s.mask]
	st.RLock()
	defer st.RUnlock()
	for ms := st.m[hash]; ms != nil; ms = ms.next {
		if labels.Equal(ms.lset, lset) && !ms.isDead() {
			return ms
		}
	}
	return nil
}

func (ms *memSeries) isDead() bool {
	ms.mu.Lock()
	d := ms.dead
	ms.mu.Unlock()
	return d
}

// getOrSet returns the live series with the labels of ms, or inserts ms and
// returns it. created tells which.
func (s *stripeSeries) getOrSet(ms *memSeries) (_ *memSeries, created bool) {
	st := &s.hashes[ms.hash&s.mask]
	st.Lock()
	for o := st.m[ms.hash]; o != nil; o = o.next {
		if labels.Equal(o.lset, ms.lset) && !o.isDead() {
			st.Unlock()
			return o, false
		}
	}
	ms.next = st.m[ms.hash]
	st.m[ms.hash] = ms
	st.peak = max(st.peak, len(st.m))
	st.Unlock()
	s.refs.set(ms.ref, ms)
	return ms, true
}

// replaceByLabels makes ms the series for its labels in place of old
// (replay only: a newer ref for the same labels). old stays reachable by
// its ref until the caller removes it.
func (s *stripeSeries) replaceByLabels(old, ms *memSeries) {
	st := &s.hashes[ms.hash&s.mask]
	st.Lock()
	if head := st.m[ms.hash]; head == old {
		ms.next = old.next
		st.m[ms.hash] = ms
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == old {
				ms.next, p.next = old.next, ms
				break
			}
		}
	}
	old.next = nil
	st.Unlock()
	s.refs.set(ms.ref, ms)
}

// deleteRef removes ref from the ref index (replay only).
func (s *stripeSeries) deleteRef(ref chunks.HeadSeriesRef) {
	s.refs.set(ref, nil)
}

// gc marks dead and removes every series that is not pending and was last
// touched before cutoff, and returns them.
func (s *stripeSeries) gc(cutoff int64) []*memSeries {
	var victims []*memSeries
	s.refs.mu.Lock()
	s.refs.forEachLocked(func(ref chunks.HeadSeriesRef, ms *memSeries) {
		ms.mu.Lock()
		if ms.pending == 0 && ms.touched < cutoff {
			ms.dead = true
			victims = append(victims, ms)
			s.refs.setLocked(ref, nil)
		}
		ms.mu.Unlock()
	})
	if len(victims) > 0 {
		s.refs.compactLocked()
	}
	s.refs.mu.Unlock()
	for _, ms := range victims {
		st := &s.hashes[ms.hash&s.mask]
		st.Lock()
		head := st.m[ms.hash]
		if head == ms {
			head = ms.next
		} else {
			for p := head; p != nil; p = p.next {
				if p.next == ms {
					p.next = ms.next
					break
				}
			}
		}
		ms.next = nil
		if head == nil {
			delete(st.m, ms.hash)
		} else {
			st.m[ms.hash] = head
		}
		st.Unlock()
	}
	// Shrink once all victims are out: shrinking on the way down would
	// leave maps sized for some midpoint.
	touched := make([]bool, len(s.hashes))
	for _, ms := range victims {
		touched[ms.hash&s.mask] = true
	}
	for i, t := range touched {
		if t {
			st := &s.hashes[i]
			st.Lock()
			st.m = shrink(st.m, &st.peak)
			st.Unlock()
		}
	}
	return victims
}

// forEach calls f for every live series.
func (s *stripeSeries) forEach(f func(*memSeries)) {
	for i := range s.hashes {
		st := &s.hashes[i]
		st.RLock()
		for _, head := range st.m {
			for ms := head; ms != nil; ms = ms.next {
				f(ms)
			}
		}
		st.RUnlock()
	}
}

// shrinkMin is the smallest peak worth rebuilding a map for.
const shrinkMin = 64

// shrink returns m, or a copy of it sized to its contents once it holds
// fewer than a quarter of its peak entries (and resets peak): a Go map
// keeps the memory of its largest size. The quarter keeps the copying
// amortised: a map is copied only after three times its new size in
// deletions.
func shrink[K comparable, V any](m map[K]V, peak *int) map[K]V {
	if *peak < shrinkMin || len(m) >= *peak/4 {
		return m
	}
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	*peak = len(out)
	return out
}
