package handover

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/shoal-dev/shoal/internal/atomicfile"
	"github.com/shoal-dev/shoal/placement"
)

// HandedOver is this node's own backlog as it left: handed to Peer, its
// fences up to Seq, from the life that started at Start. A replica that
// starts again on the same storage (a StatefulSet pod) scrapes the same
// targets again, so its queues must wait until Peer has delivered that
// backlog: its own newer samples, sent first, would make the backlog's
// older ones out of order at the remote end.
type HandedOver struct {
	Node  string `json:"node"`
	Start int64  `json:"start"` // Unix milliseconds, as the carry key has it
	Seq   uint64 `json:"seq"`
	Peer  string `json:"peer"`
}

// handedOverFile is where the store keeps the record, beside the
// backlogs taken over.
const handedOverFile = "handed-over.json"

func (s *Store) setHandedOver(h HandedOver) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(s.dir, handedOverFile), b)
}

// handedOver reads the record; ok is false when there is none.
func (s *Store) handedOver() (h HandedOver, ok bool, err error) {
	path := filepath.Join(s.dir, handedOverFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return h, false, nil
	}
	if err != nil {
		return h, false, err
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return h, false, fmt.Errorf("%s: %w", path, err)
	}
	return h, true, nil
}

func (s *Store) clearHandedOver() error {
	err := os.Remove(filepath.Join(s.dir, handedOverFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// takeUpHandedOver gives the tracker the backlog this node's previous
// life handed over, if any, before placement asks Carried at start. The
// record goes once the tracker finds it delivered.
func (s *Service) takeUpHandedOver() {
	h, ok, err := s.store.handedOver()
	if err != nil {
		s.logger.Warn("Cannot read which backlog the previous run handed over; not waiting for its delivery", "err", err)
		return
	}
	if !ok {
		return
	}
	d := placement.Departed{Node: h.Node, Start: time.UnixMilli(h.Start), Seq: h.Seq}
	s.tracker.setOwn(d, h.Peer, func() {
		if err := s.store.clearHandedOver(); err != nil {
			s.logger.Warn("Cannot remove the record of the backlog handed over", "err", err)
		}
	})
	s.logger.Info("Holding the remote-write queues until the backlog the previous run handed over is delivered", "peer", h.Peer, "seq", h.Seq)
}
