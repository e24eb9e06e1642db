// Package sink is a light remote-write receiver for benchmarks: it decodes
// snappy-compressed remote-write requests (protocol 1.0 and 2.0), counts
// samples, distinct series and the newest sample timestamp, and records how
// far behind real time each request is. It stores nothing, so that the
// receiver costs little CPU next to the agent being measured and every agent
// pays the same receiving cost.
package sink

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/golang/snappy"
	"google.golang.org/protobuf/encoding/protowire"
)

// MaxRequestBytes bounds the body (compressed and decompressed) of one
// request; larger requests get 413.
const MaxRequestBytes = 64 << 20

// maxLagSamples bounds the per-request lag values kept for percentiles.
const maxLagSamples = 200_000

// Sink counts what agents remote-write to it. The zero value is not usable;
// use New.
type Sink struct {
	now func() time.Time

	samples    atomic.Int64 // float samples and histogram samples
	requests   atomic.Int64
	rejected   atomic.Int64
	newestMs   atomic.Int64
	bytesIn    atomic.Int64
	mu         sync.Mutex
	series     map[uint64]struct{}
	lags       []float64 // seconds, one per accepted request with samples
	lastErr    string
	bufPool    sync.Pool
	trackSerie bool
}

// Options configure a Sink.
type Options struct {
	// TrackSeries keeps the hash of every series seen so that Snapshot can
	// report distinct series. Default false: costs a map insert per series.
	TrackSeries bool
	// Now returns the current time. Default time.Now.
	Now func() time.Time
}

// New returns an empty Sink.
func New(o Options) *Sink {
	s := &Sink{now: o.Now, trackSerie: o.TrackSeries, series: map[uint64]struct{}{}}
	if s.now == nil {
		s.now = time.Now
	}
	s.newestMs.Store(math.MinInt64)
	return s
}

// Snapshot is a copy of a Sink's counters at one moment.
type Snapshot struct {
	Time     time.Time
	Samples  int64 // samples and histogram samples accepted since New or Reset
	Requests int64 // requests accepted
	Rejected int64 // requests answered with an error status
	Bytes    int64 // compressed request bytes accepted
	// NewestMs is the newest sample timestamp seen (ms since epoch), or
	// math.MinInt64 when nothing was received.
	NewestMs int64
	Series   int // distinct series seen (only with Options.TrackSeries)
	LastErr  string
}

// Snapshot returns the current counters.
func (s *Sink) Snapshot() Snapshot {
	s.mu.Lock()
	n, le := len(s.series), s.lastErr
	s.mu.Unlock()
	return Snapshot{
		Time:     s.now(),
		Samples:  s.samples.Load(),
		Requests: s.requests.Load(),
		Rejected: s.rejected.Load(),
		Bytes:    s.bytesIn.Load(),
		NewestMs: s.newestMs.Load(),
		Series:   n,
		LastErr:  le,
	}
}

// Freshness is how far the newest sample seen lags behind now (the
// end-to-end lag as sampled by an observer), and false before any sample.
func (s *Sink) Freshness() (time.Duration, bool) {
	ms := s.newestMs.Load()
	if ms == math.MinInt64 {
		return 0, false
	}
	return s.now().Sub(time.UnixMilli(ms)), true
}

// TakeLags returns the per-request lags (receive time minus the newest
// sample in that request, seconds) recorded since the last call, and forgets
// them.
func (s *Sink) TakeLags() []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lags
	s.lags = nil
	return l
}

// ResetSeries forgets the distinct series seen so far.
func (s *Sink) ResetSeries() {
	s.mu.Lock()
	s.series = map[uint64]struct{}{}
	s.mu.Unlock()
}

// ServeHTTP accepts a remote-write request on any path.
func (s *Sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "remote write needs POST", http.StatusMethodNotAllowed)
		return
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "snappy") {
		s.fail(w, http.StatusUnsupportedMediaType, fmt.Errorf("unsupported Content-Encoding %q", enc))
		return
	}
	v2 := strings.Contains(r.Header.Get("Content-Type"), "io.prometheus.write.v2.Request")

	bp, _ := s.bufPool.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	defer s.bufPool.Put(bp)
	body, err := readAll(r.Body, (*bp)[:0])
	*bp = body
	if err != nil {
		s.fail(w, http.StatusRequestEntityTooLarge, err)
		return
	}
	n, err := snappy.DecodedLen(body)
	if err != nil || n > MaxRequestBytes {
		s.fail(w, http.StatusBadRequest, fmt.Errorf("bad snappy block: len %d, %v", n, err))
		return
	}
	raw, err := snappy.Decode(make([]byte, n), body)
	if err != nil {
		s.fail(w, http.StatusBadRequest, fmt.Errorf("snappy: %w", err))
		return
	}
	var st stats
	if v2 {
		err = scanV2(raw, &st, s.trackSerie)
	} else {
		err = scanV1(raw, &st, s.trackSerie)
	}
	if err != nil {
		s.fail(w, http.StatusBadRequest, fmt.Errorf("protobuf: %w", err))
		return
	}
	recv := s.now()
	s.samples.Add(st.samples)
	s.requests.Add(1)
	s.bytesIn.Add(int64(len(body)))
	for {
		cur := s.newestMs.Load()
		if st.newest <= cur || s.newestMs.CompareAndSwap(cur, st.newest) {
			break
		}
	}
	if st.samples > 0 || len(st.hashes) > 0 {
		s.mu.Lock()
		if st.samples > 0 && len(s.lags) < maxLagSamples {
			s.lags = append(s.lags, recv.Sub(time.UnixMilli(st.newest)).Seconds())
		}
		for _, h := range st.hashes {
			s.series[h] = struct{}{}
		}
		s.mu.Unlock()
	}
	if v2 {
		w.Header().Set("X-Prometheus-Remote-Write-Samples-Written", fmt.Sprint(st.floats))
		w.Header().Set("X-Prometheus-Remote-Write-Histograms-Written", fmt.Sprint(st.histograms))
		w.Header().Set("X-Prometheus-Remote-Write-Exemplars-Written", "0")
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Sink) fail(w http.ResponseWriter, code int, err error) {
	s.rejected.Add(1)
	s.mu.Lock()
	s.lastErr = err.Error()
	s.mu.Unlock()
	http.Error(w, err.Error(), code)
}

func readAll(r io.Reader, buf []byte) ([]byte, error) {
	lr := io.LimitReader(r, MaxRequestBytes+1)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, max(512, cap(buf)))
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > MaxRequestBytes {
			return buf, errors.New("request body too large")
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

type stats struct {
	samples, floats, histograms int64
	newest                      int64
	hashes                      []uint64
}

func (st *stats) ts(t int64) {
	if st.samples == 1 || t > st.newest {
		st.newest = t
	}
}

// field iterates the top-level fields of one protobuf message.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var y uint32
			y, n = protowire.ConsumeFixed32(b)
			x = uint64(y)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// timestampOf returns field tsField (an int64 varint) of a message.
func timestampOf(msg []byte, tsField protowire.Number) (int64, error) {
	var t int64
	err := fields(msg, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
		if num == tsField && typ == protowire.VarintType {
			t = int64(x)
		}
		return nil
	})
	return t, err
}

// countSample counts one Sample (timestamp field 2) or Histogram (timestamp
// field 15) message; both protocol versions number them the same way.
func (st *stats) countSample(msg []byte, histogram bool) error {
	tsField := protowire.Number(2)
	if histogram {
		tsField = 15
		st.histograms++
	} else {
		st.floats++
	}
	t, err := timestampOf(msg, tsField)
	if err != nil {
		return err
	}
	st.samples++
	st.ts(t)
	return nil
}

// scanV1 counts a prometheus.WriteRequest: timeseries=1 {labels=1,
// samples=2 {timestamp=2}, exemplars=3, histograms=4 {timestamp=15}}.
func scanV1(raw []byte, st *stats, track bool) error {
	return fields(raw, func(num protowire.Number, typ protowire.Type, ts []byte, _ uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		var h *xxhash.Digest
		if track {
			h = xxhash.New()
		}
		err := fields(ts, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			if typ != protowire.BytesType {
				return nil
			}
			switch num {
			case 1:
				if h != nil {
					_, _ = h.Write(v)
					_, _ = h.Write([]byte{0xff})
				}
			case 2, 4:
				return st.countSample(v, num == 4)
			}
			return nil
		})
		if h != nil {
			st.hashes = append(st.hashes, h.Sum64())
		}
		return err
	})
}

// scanV2 counts an io.prometheus.write.v2.Request: symbols=4,
// timeseries=5 {labels_refs=1 (packed), samples=2 {timestamp=2},
// histograms=3 {timestamp=15}}.
func scanV2(raw []byte, st *stats, track bool) error {
	var symbols [][]byte
	if track {
		if err := fields(raw, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			if num == 4 && typ == protowire.BytesType {
				symbols = append(symbols, v)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return fields(raw, func(num protowire.Number, typ protowire.Type, ts []byte, _ uint64) error {
		if num != 5 || typ != protowire.BytesType {
			return nil
		}
		var h *xxhash.Digest
		if track {
			h = xxhash.New()
		}
		err := fields(ts, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
			switch {
			case num == 1 && h != nil:
				refs := []uint64{x}
				if typ == protowire.BytesType {
					refs = refs[:0]
					for len(v) > 0 {
						r, n := protowire.ConsumeVarint(v)
						if n < 0 {
							return protowire.ParseError(n)
						}
						refs = append(refs, r)
						v = v[n:]
					}
				}
				for _, r := range refs {
					if r >= uint64(len(symbols)) {
						return fmt.Errorf("label ref %d out of %d symbols", r, len(symbols))
					}
					_, _ = h.Write(symbols[r])
					_, _ = h.Write([]byte{0xff})
				}
			case (num == 2 || num == 3) && typ == protowire.BytesType:
				return st.countSample(v, num == 3)
			}
			return nil
		})
		if h != nil {
			st.hashes = append(st.hashes, h.Sum64())
		}
		return err
	})
}

// Percentile returns the p-th percentile (0..100) of vals, sorting vals in
// place; NaN for an empty slice.
func Percentile(vals []float64, p float64) float64 {
	if len(vals) == 0 {
		return math.NaN()
	}
	slices.Sort(vals)
	i := int(math.Ceil(p/100*float64(len(vals)))) - 1
	return vals[min(max(i, 0), len(vals)-1)]
}
