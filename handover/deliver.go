package handover

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/placement"
	"github.com/shoal-dev/shoal/remotewrite"
)

// deliverPoll is how often a backlog's queues are asked whether they have
// delivered it.
var deliverPoll = 200 * time.Millisecond

// Run sends the stored backlogs, oldest first and one at a time, until
// ctx ends or Leave stops it, and keeps the tracker current.
func (s *Service) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.runMu.Lock()
	s.runCancel, s.runDone = cancel, done
	s.runMu.Unlock()
	defer close(done)
	defer cancel()
	select {
	case <-s.leaving:
		return // Leave has run: nothing is delivered from here any more
	default:
	}
	trackerDone := make(chan struct{})
	go func() {
		defer close(trackerDone)
		s.tracker.Run(ctx)
	}()
	defer func() { <-trackerDone }()
	defer cancel()
	for ctx.Err() == nil {
		pend, err := s.store.Pending()
		if err != nil {
			s.logger.Error("Cannot list the backlogs taken over", "dir", s.opts.Dir, "err", err)
		}
		if len(pend) == 0 || s.config() == nil {
			select {
			case <-ctx.Done():
			case <-s.wake:
			case <-s.cfgCh:
			case <-time.After(5 * time.Second):
			}
			continue
		}
		s.deliver(ctx, pend[0])
	}
}

// stopDelivery stops Run and waits for it.
func (s *Service) stopDelivery() {
	s.runMu.Lock()
	cancel, done := s.runCancel, s.runDone
	s.runMu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// deliver sends one backlog with a remote-write Manager over its copy
// until every queue has acknowledged its end or ctx ends (the progress
// files then say how far it got, for the next run).
func (s *Service) deliver(ctx context.Context, b Backlog) {
	walDir, progressDir := backlogDirs(b.Dir)
	reg := prometheus.WrapRegistererWithPrefix("shoal_handover_", s.reg)
	logger := s.logger.With("backlog", b.ID, "from", b.Node)
	m, err := remotewrite.NewManager(walDir, progressDir, logger, reg)
	if err != nil {
		logger.Error("Cannot start the queues of a backlog taken over", "err", err)
		sleep(ctx, 5*time.Second)
		return
	}
	defer m.Close()
	holds := s.carryHolds(b, m, logger) // before the queues start
	defer holds.Close()
	cfg := s.config()
	if err := m.ApplyConfig(cfg); err != nil {
		logger.Error("Cannot apply the remote_write configuration to a backlog taken over", "err", err)
		sleep(ctx, 5*time.Second)
		return
	}
	mctx, mcancel := context.WithCancel(ctx)
	defer mcancel()
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = m.Run(mctx)
	}()
	defer func() { m.Stop(0); mcancel(); <-runDone }()
	logger.Info("Sending a backlog taken over from a departed replica", "end_segment", b.End.Segment, "end_offset", b.End.Offset)
	started := time.Now()
	tick := time.NewTicker(deliverPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.cfgCh:
			if c := s.config(); c != cfg {
				cfg = c
				if err := m.ApplyConfig(cfg); err != nil {
					logger.Warn("New remote_write configuration refused for a backlog taken over; keeping the old one", "err", err)
				}
			}
		case <-tick.C:
		}
		holds.Step()
		s.setAcked(b.ID, holds.AckedSeq())
		if !m.Acked(b.End) {
			continue
		}
		m.Stop(time.Second)
		s.setAcked(b.ID, 0)
		if err := s.store.Delivered(b.ID); err != nil {
			logger.Error("Backlog delivered but its files could not be removed; it will be checked again", "err", err)
			sleep(ctx, 5*time.Second)
			return
		}
		if err := s.announce(); err != nil {
			logger.Warn("Updating the carried backlogs failed", "err", err)
		}
		s.metrics.delivered.Inc()
		logger.Info("Backlog taken over is delivered", "duration", time.Since(started))
		return
	}
}

// carryHolds keeps the leaver's holds of b on m, the queues that send it.
func (s *Service) carryHolds(b Backlog, m placement.HoldQueues, logger *slog.Logger) CarriedHolds {
	s.holdsMu.Lock()
	keep := s.holds
	s.holdsMu.Unlock()
	if keep == nil || len(b.HandOff) == 0 {
		return noHolds{}
	}
	h, err := keep(b.HandOff, m)
	if err != nil {
		// Never sending it would lose it with the next scale-in.
		logger.Error("Cannot read the hand-off state of a backlog taken over; sending it without its leaver's holds (the remote end may refuse samples as out of order)", "err", err)
		return noHolds{}
	}
	return h
}

// setAcked records how far b's leaver's fences are delivered (0: forget
// it) and announces it when it moved: peers' holds waiting for one of
// those fences then go.
func (s *Service) setAcked(id string, seq uint64) {
	s.holdsMu.Lock()
	old := s.acked[id]
	if seq == 0 {
		delete(s.acked, id)
	} else {
		s.acked[id] = seq
	}
	s.holdsMu.Unlock()
	if seq == 0 || seq == old {
		return
	}
	if err := s.announce(); err != nil {
		s.logger.Warn("Updating the carried backlogs failed", "err", err)
	}
}

type noHolds struct{}

func (noHolds) Step() int        { return 0 }
func (noHolds) AckedSeq() uint64 { return 0 }
func (noHolds) Close()           {}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
