package handover

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/prometheus/tsdb/record"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/remotewrite"
	"github.com/shoal-dev/shoal/wal"
)

// Own describes this node's backlog for Leave.
type Own struct {
	// Dir is --storage.path, holding wal/ and remotewrite/.
	Dir string
	// Node, Start and Seq name this node's life and its last fence;
	// Final says that fence is its final one (Watermarks.Final): nothing
	// in the backlog comes after it.
	Node  string
	Start time.Time
	Seq   uint64
	Final bool
	// Queues are the remote-write queue names and End the WAL's end:
	// after a transfer, their progress is marked as sent up to End.
	Queues []string
	End    wal.Position
	// HandOff is the node's hand-off state (Header.HandOff).
	HandOff []byte
}

// TransferStatus describes an outgoing transfer, for the status page.
type TransferStatus struct {
	ID       string        `json:"id"`
	Node     string        `json:"node"` // whose backlog
	Peer     string        `json:"peer,omitempty"`
	Bytes    int64         `json:"bytes"`
	Samples  int64         `json:"samples"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration"`
	Error    string        `json:"error,omitempty"`
	Reason   string        `json:"reason,omitempty"`
}

// Leave stops taking transfers and delivering, and hands what this node
// holds to peers within Options.Timeout: first the backlogs it took over
// (they are older), then own (nil: none). What cannot be handed over
// stays where it is, counted and logged: a replica that starts again on
// the same storage sends it.
func (s *Service) Leave(ctx context.Context, own *Own) {
	s.leaveOnce.Do(func() { close(s.leaving) })
	s.recvMu.Lock() // wait for a transfer being received
	s.recvMu.Unlock()
	s.stopDelivery()
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	pend, err := s.store.Pending()
	if err != nil {
		s.logger.Error("Cannot list the backlogs taken over; they stay on this node's storage", "err", err)
	}
	for _, b := range pend {
		if _, err := s.send(ctx, b.Dir, b.Header); err != nil {
			continue
		}
		if err := s.store.Delivered(b.ID); err != nil {
			s.logger.Error("Backlog passed on but its local copy could not be removed", "id", b.ID, "err", err)
		}
		if err := s.announce(); err != nil {
			s.logger.Warn("Updating the carried backlogs failed", "err", err)
		}
	}
	if own == nil {
		return
	}
	h := Header{ID: newID(), Node: own.Node, Start: own.Start.UnixMilli(), Seq: own.Seq, HandOff: own.HandOff}
	peer, err := s.send(ctx, own.Dir, h)
	if err != nil {
		return
	}
	// Recorded before the progress is marked: a replica started on this
	// storage then either sends the backlog itself or waits for the peer's
	// delivery, never neither.
	rec := HandedOver{Node: h.Node, Start: h.Start, Peer: peer}
	if own.Final {
		// Otherwise samples after Seq are in the backlog too, and only
		// the whole backlog's delivery ends the wait.
		rec.Seq = h.Seq
	}
	if err := s.store.setHandedOver(rec); err != nil {
		s.logger.Error("Backlog handed over but not recorded; a replica started on this storage may send newer samples before the peer delivers it", "err", err)
	}
	walDir, progressDir := backlogDirs(own.Dir)
	if err := remotewrite.MarkHandedOver(walDir, progressDir, own.Queues, own.End); err != nil {
		// The peer has it too now: a restart on this storage would send
		// it twice, which the remote end refuses as duplicates.
		s.logger.Error("Backlog handed over but this node's progress could not be marked as sent", "err", err)
	}
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type backlogFile struct {
	name string // relative, slash-separated
	size int64
}

// send hands the backlog in root to one peer, trying them in turn, and
// returns the peer that took it.
func (s *Service) send(ctx context.Context, root string, h Header) (peer string, _ error) {
	st := &TransferStatus{ID: h.ID, Node: h.Node, Started: time.Now()}
	s.statusMu.Lock()
	s.sending = st
	s.statusMu.Unlock()
	s.metrics.inFlight.WithLabelValues("sent").Inc()
	reason, err := s.sendTo(ctx, root, &h, st)
	s.metrics.inFlight.WithLabelValues("sent").Dec()
	s.setStatus(func() {
		st.Duration = time.Since(st.Started)
		if err != nil {
			st.Error, st.Reason = err.Error(), reason
		}
	})
	if err != nil {
		s.metrics.failures.WithLabelValues("sent", reason).Inc()
		s.logger.Error("Backlog hand-over failed; the backlog stays on this node's storage (a replica started on it sends it)",
			"id", h.ID, "node", h.Node, "reason", reason, "bytes", h.Bytes, "err", err)
	} else {
		s.metrics.bytes.WithLabelValues("sent").Add(float64(h.Bytes))
		s.metrics.samples.WithLabelValues("sent").Add(float64(h.Samples))
		s.metrics.transfers.WithLabelValues("sent").Inc()
		s.metrics.duration.Observe(st.Duration.Seconds())
		s.logger.Info("Backlog handed over", "id", h.ID, "node", h.Node, "peer", st.Peer, "bytes", h.Bytes, "samples", h.Samples, "duration", st.Duration)
	}
	s.statusMu.Lock()
	s.sending, s.last = nil, st
	peer = st.Peer
	s.statusMu.Unlock()
	return peer, err
}

func (s *Service) sendTo(ctx context.Context, root string, h *Header, st *TransferStatus) (reason string, _ error) {
	files, err := listBacklog(root)
	if err != nil {
		return ReasonLocal, err
	}
	h.Files = len(files)
	h.Bytes = 0
	for _, f := range files {
		h.Bytes += f.size
	}
	s.setStatus(func() { st.Bytes = h.Bytes })
	if h.Bytes > s.opts.MaxBytes {
		return ReasonTooLarge, fmt.Errorf("the backlog is %d bytes, over --cluster.handover.max-bytes=%d", h.Bytes, s.opts.MaxBytes)
	}
	if h.Samples, err = countSamples(ctx, root); err != nil {
		s.logger.Warn("Cannot count the backlog's samples (metrics only)", "err", err)
	}
	s.setStatus(func() { st.Samples = h.Samples })
	peers := s.candidates(h.Node)
	if len(peers) == 0 {
		return ReasonNoPeer, errors.New("no live participant peer to hand the backlog to")
	}
	reason, err = ReasonNoPeer, nil
	for _, p := range peers {
		s.setStatus(func() { st.Peer = p.Name })
		// A connection cut after the body was sent is ambiguous (the peer
		// may have stored it): the same peer is asked again with the same
		// id, which it answers as a duplicate, before any other is.
		for attempt := 0; attempt < 3; attempt++ {
			reason, err = s.post(ctx, p, root, *h, files)
			if err == nil {
				s.awaitAnnouncement(ctx, p.Name, cluster.CarryKey(h.Node, time.UnixMilli(h.Start)))
				return "", nil
			}
			if ctx.Err() != nil {
				return ReasonDeadline, fmt.Errorf("--cluster.handover.timeout passed: %w", err)
			}
			s.logger.Warn("Backlog transfer to a peer failed", "peer", p.Name, "reason", reason, "err", err)
			if reason != ReasonNetwork {
				break
			}
			sleep(ctx, 200*time.Millisecond)
		}
		if reason == ReasonTooLarge || reason == ReasonLocal {
			return reason, err
		}
	}
	return reason, err
}

// candidates are the live participants but self and the backlog's node,
// in an order that spreads leavers over peers.
func (s *Service) candidates(node string) []cluster.Peer {
	if s.cl == nil {
		return nil
	}
	self := s.cl.Self().Name
	var out []cluster.Peer
	for _, p := range s.cl.Peers() {
		if p.Self || p.Name == self || p.Name == node || p.State != cluster.Participant || p.HTTPAddr == "" {
			continue
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil
	}
	f := fnv.New32a()
	f.Write([]byte(self))
	k := int(f.Sum32() % uint32(len(out)))
	return append(out[k:], out[:k]...)
}

// post streams one transfer to p.
func (s *Service) post(ctx context.Context, p cluster.Peer, root string, h Header, files []backlogFile) (string, error) {
	u := &url.URL{Scheme: s.opts.Scheme, Host: p.HTTPAddr, Path: "/api/v1/handover"}
	if strings.Contains(p.HTTPAddr, "://") {
		base, err := url.Parse(p.HTTPAddr)
		if err != nil {
			return ReasonRefused, err
		}
		u.Scheme, u.Host = base.Scheme, base.Host
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(encodeBacklog(pw, root, h, files)) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), pr)
	if err != nil {
		pr.Close()
		return ReasonRefused, err
	}
	req.Header.Set("Content-Type", "application/x-shoal-handover")
	resp, err := s.opts.Client.Do(req)
	pr.CloseWithError(errors.New("request ended"))
	if err != nil {
		var le localErr
		if errors.As(err, &le) {
			return ReasonLocal, err
		}
		return ReasonNetwork, err
	}
	defer resp.Body.Close()
	var a answer
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&a)
	if resp.StatusCode == http.StatusOK && (a.Status == "stored" || a.Status == "duplicate") && a.ID == h.ID {
		return "", nil
	}
	reason := ReasonRefused
	switch {
	case a.Reason == ReasonVersion:
		reason = ReasonVersion
	case resp.StatusCode == http.StatusRequestEntityTooLarge:
		reason = ReasonTooLarge
	}
	hint := ""
	if resp.StatusCode == http.StatusUnauthorized {
		hint = " (set --web.client-config.file with credentials the peers accept)"
	}
	return reason, fmt.Errorf("POST %s answered %s: %s%s", u, resp.Status, a.Error, hint)
}

type localErr struct{ error }

func (e localErr) Unwrap() error { return e.error }

func encodeBacklog(w io.Writer, root string, h Header, files []backlogFile) error {
	enc, err := NewEncoder(w, h)
	if err != nil {
		return err
	}
	for _, f := range files {
		fh, err := os.Open(filepath.Join(root, filepath.FromSlash(f.name)))
		if err != nil {
			return localErr{err}
		}
		err = enc.File(f.name, f.size, fh)
		fh.Close()
		if err != nil {
			return err
		}
	}
	return enc.Close()
}

// awaitAnnouncement waits, briefly, until this node sees the receiver
// announce the backlog: leaving before would let peers see this node gone
// before they see the backlog carried.
func (s *Service) awaitAnnouncement(ctx context.Context, peer string, key uint64) {
	deadline := time.Now().Add(announceWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, p := range s.cl.Peers() {
			if p.Name == peer && announces(p, key) {
				return
			}
		}
		sleep(ctx, 20*time.Millisecond)
	}
	s.logger.Warn("The receiving peer's announcement of the backlog was not seen before leaving", "peer", peer)
}

// listBacklog lists what a backlog consists of under root: the WAL's
// segments, checkpoint and repair record, and the progress files and
// journals of the remote-write queues.
func listBacklog(root string) ([]backlogFile, error) {
	var out []backlogFile
	add := func(rel string) error {
		fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		out = append(out, backlogFile{name: rel, size: fi.Size()})
		return nil
	}
	walDir, progressDir := backlogDirs(root)
	ents, err := os.ReadDir(walDir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		n := e.Name()
		switch {
		case !e.IsDir() && (isDigits(n) || n == "repairs.json"):
			if err := add(path.Join("wal", n)); err != nil {
				return nil, err
			}
		case e.IsDir() && strings.HasPrefix(n, "checkpoint.") && isDigits(strings.TrimPrefix(n, "checkpoint.")):
			cps, err := os.ReadDir(filepath.Join(walDir, n))
			if err != nil {
				return nil, err
			}
			for _, c := range cps {
				if !c.IsDir() && isDigits(c.Name()) {
					if err := add(path.Join("wal", n, c.Name())); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	ents, err = os.ReadDir(progressDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() && !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".json") || strings.HasSuffix(n, ".acks")) && validPath("remotewrite/"+n) == nil {
			if err := add("remotewrite/" + n); err != nil {
				return nil, err
			}
		}
	}
	slices.SortFunc(out, func(a, b backlogFile) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// countSamples counts the samples and histograms after the lowest saved
// progress position (from the start without any). It is for metrics and
// the status page only, so it gives up after a tenth of the time left.
func countSamples(ctx context.Context, root string) (int64, error) {
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Until(dl)/10)
		defer cancel()
	}
	walDir, progressDir := backlogDirs(root)
	from, found := wal.Position{}, false
	ents, _ := os.ReadDir(progressDir)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(progressDir, e.Name()))
		if err != nil {
			continue
		}
		var pf struct {
			Segment int   `json:"segment"`
			Offset  int64 `json:"offset"`
		}
		if json.Unmarshal(raw, &pf) != nil {
			continue
		}
		p := wal.Position{Segment: pf.Segment, Offset: pf.Offset}
		if !found || p.Less(from) {
			from, found = p, true
		}
	}
	var n int64
	var dec record.Decoder
	var smp []record.RefSample
	var hs []record.RefHistogramSample
	var fhs []record.RefFloatHistogramSample
	err := wal.Scan(walDir, from, -1, func(rec []byte, _ wal.Position) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("counting the backlog's samples: %w", err)
		}
		var err error
		switch dec.Type(rec) {
		case record.Samples:
			smp, err = dec.Samples(rec, smp[:0])
			n += int64(len(smp))
		case record.HistogramSamples:
			hs, err = dec.HistogramSamples(rec, hs[:0])
			n += int64(len(hs))
		case record.FloatHistogramSamples:
			fhs, err = dec.FloatHistogramSamples(rec, fhs[:0])
			n += int64(len(fhs))
		}
		return err
	})
	return n, err
}

func (s *Service) setStatus(f func()) {
	s.statusMu.Lock()
	f()
	s.statusMu.Unlock()
}

// Status is what the status page shows.
type Status struct {
	Sending  *TransferStatus `json:"sending,omitempty"`
	Last     *TransferStatus `json:"last,omitempty"`
	Pending  []Backlog       `json:"pending"`
	Timeout  time.Duration   `json:"timeout"`
	MaxBytes int64           `json:"maxBytes"`
}

// Status describes the transfers and the backlogs held.
func (s *Service) Status() Status {
	st := Status{Timeout: s.opts.Timeout, MaxBytes: s.opts.MaxBytes}
	s.statusMu.Lock()
	if s.sending != nil {
		c := *s.sending
		c.Duration = time.Since(c.Started)
		st.Sending = &c
	}
	if s.last != nil {
		c := *s.last
		st.Last = &c
	}
	s.statusMu.Unlock()
	st.Pending, _ = s.store.Pending()
	return st
}
