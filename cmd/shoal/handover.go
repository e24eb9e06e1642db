package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/handover"
	"github.com/shoal-dev/shoal/internal/promreg"
	"github.com/shoal-dev/shoal/placement"
	"github.com/shoal-dev/shoal/remotewrite"
	"github.com/shoal-dev/shoal/web"
)

// newHandover builds the backlog hand-over service when clustering is on
// and --cluster.handover.timeout is not 0.
func (a *agent) newHandover() error {
	f := a.f
	if a.node == nil || f.handoverTimeout == 0 {
		return nil
	}
	client, scheme, err := web.PeerClient(f.webConfigFile, f.webClientConfigFile)
	if err != nil {
		return badConfig(err)
	}
	a.handover, err = handover.New(handover.Options{
		Dir:      filepath.Join(f.storagePath, "handover"),
		Timeout:  f.handoverTimeout,
		MaxBytes: int64(f.handoverMaxBytes),
		// A leaver whose backlog stayed on its storage may come back and
		// send it: wait for it as long as a hold waits for a live peer.
		LeaverWait: f.handoffTimeout,
		Client:     client,
		Scheme:     scheme,
	}, a.node, a.logger.With("component", "handover"), a.reg)
	return err
}

// backlogs is what placement's holds ask about departed peers' backlogs.
func (a *agent) backlogs() placement.Backlogs {
	if a.handover == nil {
		return nil
	}
	return a.handover.Tracker()
}

// keepCarriedHolds has the backlogs taken over sent behind their leavers'
// holds, which placement judges.
func (a *agent) keepCarriedHolds() {
	if a.handover == nil {
		return
	}
	a.handover.SetHolds(func(state []byte, q placement.HoldQueues) (handover.CarriedHolds, error) {
		return a.placement.CarryHolds(state, q)
	})
}

// handOver runs once the remote-write queues have stopped: what they have
// not had acknowledged, and the backlogs this node took over, go to a peer.
func (a *agent) handOver() {
	if a.handover == nil {
		return
	}
	var own *handover.Own
	end, err := a.wal.EndPosition()
	switch {
	case err != nil:
		a.logger.Error("Cannot read the WAL end; this node's backlog is not handed over", "err", err)
	case !a.remote.Acked(end):
		// Segments every queue has passed go first, behind a checkpoint:
		// a smaller transfer.
		if err := a.wal.Truncate(); err != nil {
			a.logger.Warn("WAL truncation before the hand-over failed; sending it whole", "err", err)
		}
		self := a.node.Self()
		own = &handover.Own{
			Dir: a.f.storagePath, Node: self.Name, Start: self.StartTime, Seq: self.Handoff.FencedSeq, Final: self.Handoff.Final,
			Queues: remotewrite.QueueNames(a.cfg.Load()), End: end,
		}
		// The holds the queues were behind go with the backlog.
		if own.HandOff, err = a.placement.LeavingState(); err != nil {
			a.logger.Error("Cannot encode the hand-off state; the backlog is handed over without its holds", "err", err)
		}
		a.logger.Info("Remote-write queues hold unacknowledged samples; handing them to a peer", "timeout", a.f.handoverTimeout)
	}
	a.handover.Leave(context.Background(), own)
}

// registerUtilization exports shoal_replica_utilization_ratio when a
// per-replica capacity is configured.
func registerUtilization(reg prometheus.Registerer, capacity float64, rate func() float64) error {
	if capacity <= 0 {
		return nil
	}
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shoal_replica_utilization_ratio",
		Help: "Samples appended per second (over about 30s) divided by --cluster.capacity.samples-per-second: how full this replica is. An autoscaler keeps its average near a target below 1.",
	}, func() float64 { return rate() / capacity })
	if _, err := promreg.Register(reg, g); err != nil {
		return fmt.Errorf("registering shoal_replica_utilization_ratio: %w", err)
	}
	return nil
}
