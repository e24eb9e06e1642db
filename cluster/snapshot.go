package cluster

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"time"

	"github.com/shoal-dev/shoal/internal/atomicfile"
)

// The snapshot is what a node remembers of its cluster between two runs
// (Config.SnapshotPath): the other members' names and gossip addresses, and
// which of them were participants. On start the node joins those addresses
// besides Config.Join, and waits for the cluster it remembers (see
// startupWait) instead of bootstrapping a ring of one while its peers still
// scrape. Unlike Serf's snapshot, an append-only event log, it is one small
// JSON file replaced atomically: the member list is short and only its
// latest state matters.

const (
	snapshotVersion = 1
	// snapshotDebounce coalesces a burst of membership changes (a rollout,
	// a node joining and announcing its state) into one write.
	snapshotDebounce = time.Second
)

// snapshot is the file's content.
type snapshot struct {
	Version int       `json:"version"`
	Node    string    `json:"node"`
	Written time.Time `json:"written"`
	// Left is true when the run that wrote it ended with a graceful leave.
	Left    bool             `json:"left,omitempty"`
	Members []snapshotMember `json:"members"`
}

// snapshotMember is one other member as last seen alive. Members that left
// on purpose (memberlist's leave, or terminating) are participants no more:
// a node that left is not waited for.
type snapshotMember struct {
	Name        string `json:"name"`
	Addr        string `json:"addr"`
	Participant bool   `json:"participant,omitempty"`
}

// readSnapshot reads the snapshot at path. A missing file is no snapshot
// and no error; a file that does not decode, or holds impossible entries,
// is an error: the caller ignores it and starts as if it had none.
func readSnapshot(path, self string) (snapshot, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return snapshot{}, nil
	}
	if err != nil {
		return snapshot{}, err
	}
	var s snapshot
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return snapshot{}, fmt.Errorf("decoding %s: %w", path, err)
	}
	if s.Version != snapshotVersion {
		return snapshot{}, fmt.Errorf("%s: version %d, want %d", path, s.Version, snapshotVersion)
	}
	members := s.Members[:0]
	for _, m := range s.Members {
		if m.Name == "" {
			return snapshot{}, fmt.Errorf("%s: a member without a name", path)
		}
		if _, _, err := net.SplitHostPort(m.Addr); err != nil {
			return snapshot{}, fmt.Errorf("%s: member %q: address %q: %w", path, m.Name, m.Addr, err)
		}
		// A storage path reused under another node name may list this
		// node: it does not wait for itself.
		if m.Name != self {
			members = append(members, m)
		}
	}
	s.Members = members
	return s, nil
}

// encode renders s; equal member lists give equal bytes, so that an
// unchanged cluster is not written again.
func (s snapshot) encode() []byte {
	b, _ := json.MarshalIndent(s, "", "  ")
	return append(b, '\n')
}

// snapshotLocked is the cluster as this node sees it now.
func (n *Node) snapshotLocked() snapshot {
	s := snapshot{Version: snapshotVersion, Node: n.cfg.NodeName, Left: n.left, Members: []snapshotMember{}}
	for _, p := range n.peers {
		s.Members = append(s.Members, snapshotMember{Name: p.Name, Addr: p.Addr, Participant: p.State == Participant})
	}
	slices.SortFunc(s.Members, func(a, b snapshotMember) int { return cmp.Compare(a.Name, b.Name) })
	return s
}

// snapshotChanged asks the snapshot loop to record the member set.
func (n *Node) snapshotChanged() {
	select {
	case n.snapKick <- struct{}{}:
	default:
	}
}

// snapshotLoop writes the snapshot snapshotDebounce after a change, until
// ctx is done; Shutdown writes the last one.
func (n *Node) snapshotLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.snapKick:
		}
		t := time.NewTimer(snapshotDebounce)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		n.writeSnapshot()
	}
}

// writeSnapshot records the member set if it changed since the last write.
// A failure is logged and counted; the node runs on and tries again at the
// next change.
func (n *Node) writeSnapshot() {
	if n.cfg.SnapshotPath == "" {
		return
	}
	n.snapMu.Lock()
	defer n.snapMu.Unlock()
	n.mu.Lock()
	s := n.snapshotLocked()
	n.mu.Unlock()
	key := s.encode()
	if bytes.Equal(key, n.snapWritten) {
		return
	}
	s.Written = time.Now().UTC()
	if err := atomicfile.Write(n.cfg.SnapshotPath, s.encode()); err != nil {
		n.metrics.snapshotErrs.WithLabelValues("write").Inc()
		n.logger.Warn("Recording the cluster's members failed; a restart will rely on --cluster.join alone", "path", n.cfg.SnapshotPath, "err", err)
		return
	}
	n.snapWritten = key
	n.logger.Debug("recorded the cluster's members", "path", n.cfg.SnapshotPath, "members", len(s.Members), "left", s.Left)
}

// loadSnapshot reads the snapshot for New: the remembered members, or none
// (with a log line and a count) when the file cannot be used.
func (n *Node) loadSnapshot() snapshot {
	if n.cfg.SnapshotPath == "" {
		return snapshot{}
	}
	s, err := readSnapshot(n.cfg.SnapshotPath, n.cfg.NodeName)
	if err != nil {
		n.metrics.snapshotErrs.WithLabelValues("read").Inc()
		n.logger.Warn("Ignoring the unreadable record of the cluster's members; starting from --cluster.join alone", "path", n.cfg.SnapshotPath, "err", err)
		return snapshot{}
	}
	return s
}
