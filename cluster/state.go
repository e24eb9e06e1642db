package cluster

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
)

// State is a node's role in the cluster. Only participants own targets.
type State int

const (
	// Viewer is the state a node starts in: it gossips and sees the ring but
	// owns nothing until its configuration is loaded and its WAL replayed.
	Viewer State = iota
	// Participant nodes are on the ring and scrape the targets they own.
	Participant
	// Terminating nodes are shutting down; peers take their targets at once.
	Terminating
)

var stateNames = [...]string{Viewer: "viewer", Participant: "participant", Terminating: "terminating"}

// States lists every state, in lifecycle order.
var States = []State{Viewer, Participant, Terminating}

// String returns "viewer", "participant" or "terminating".
func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("State(%d)", int(s))
	}
	return stateNames[s]
}

func (s State) valid() bool { return s >= Viewer && s <= Terminating }

// ParseState is the inverse of State.String.
func ParseState(s string) (State, error) {
	for i, n := range stateNames {
		if n == s {
			return State(i), nil
		}
	}
	return Viewer, fmt.Errorf("unknown node state %q", s)
}

// MarshalText makes State read as its name in JSON.
func (s State) MarshalText() ([]byte, error) {
	if !s.valid() {
		return nil, fmt.Errorf("invalid node state %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText parses a state name.
func (s *State) UnmarshalText(b []byte) error {
	v, err := ParseState(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// metaVersion is bumped on incompatible changes to the metadata encoding.
// Fields added with omitempty keep it: older nodes ignore them and read as
// zero from older nodes.
const metaVersion = 1

// Watermarks is a node's hand-off progress, gossiped with its state so that
// the new owners of its targets know when it has stopped them and when its
// remote-write queues have delivered their last samples.
type Watermarks struct {
	// FencedSeq counts the fences the node has completed: after fence n the
	// node appends nothing more of any target it does not own under
	// FencedRing.
	FencedSeq uint64
	// FencedRing identifies what fence FencedSeq was made under: the ring
	// (its participant set) and the scrape configuration (placement.ViewID);
	// zero when the node has not fenced yet.
	FencedRing uint64
	// AckedSeq is the highest fence whose samples every remote-write queue
	// of the node has had acknowledged.
	AckedSeq uint64
	// FencedPlacement is the placement generation (placement.RingID) of
	// fence FencedSeq, without the scrape configuration: a peer on another
	// generation may own any target, one on the same generation with
	// another configuration only the targets whose keys it moves. Zero
	// from nodes of an older version.
	FencedPlacement uint64
	// LostSeq is the last fence (at most FencedSeq) that stopped targets
	// the node had scraped; zero when none has in this life. A new owner
	// waits only for the samples before it: a fence that stopped nothing
	// hands nothing over. From nodes of an older version, FencedSeq (any
	// fence may have stopped targets).
	LostSeq uint64
	// Continued says the node's fence numbering continues that of its
	// previous life on the same storage (FencedSeq, LostSeq and AckedSeq
	// count on from where it stopped): a peer that restarted is then
	// waited for by its fences' numbers, as before the restart. Without
	// it a restarted peer's numbers start over, and only its first
	// acknowledged fence says its previous life's samples are delivered.
	Continued bool
	// Final says the node has made its final fence: terminating, it has
	// left the ring and stopped every target, and scrapes nothing more in
	// this life. Peers need not wait for it to fence later views; only
	// its samples before that fence remain to be delivered.
	Final bool
}

// featureFinal in nodeMeta.Features is Watermarks.Final.
const featureFinal = 1 << 4

// featureContinued in nodeMeta.Features is Watermarks.Continued.
const featureContinued = 1 << 3

// featureLostSeq in nodeMeta.Features says the node announces
// Watermarks.LostSeq ("ls"; absent when zero). Without it a peer reads
// LostSeq as FencedSeq.
const featureLostSeq = 1 << 2

// ConfigIDs tells which scrape configuration a node runs (Cur) and, while a
// change it loaded is not yet the one the cluster places targets by, the
// configuration it still places by (Prev; zero when none). The placement
// package fills them with 32-bit digests of scrape.ConfigID, to keep the
// metadata small, and agrees on one of them for the whole cluster. Zero
// from older versions.
type ConfigIDs struct {
	Cur, Prev uint64
}

// nodeMeta is what a node gossips about itself in memberlist node metadata.
// Short keys keep it far below memberlist's 512-byte limit.
type nodeMeta struct {
	Version   int    `json:"v"`
	State     string `json:"s"`
	HTTPAddr  string `json:"h,omitempty"`
	KubeNode  string `json:"kn,omitempty"` // Kubernetes node name, for node-local targets
	StartTime int64  `json:"t"`            // Unix milliseconds
	Lamport   uint64 `json:"l"`
	// Hand-off watermarks; absent in metadata of older versions.
	FencedSeq  uint64 `json:"fs,omitempty"`
	FencedRing uint64 `json:"fr,omitempty"`
	AckedSeq   uint64 `json:"as,omitempty"`
	// Placement generation of the fence; absent in older versions.
	FencedPlacement uint64 `json:"fp,omitempty"`
	// Watermarks.LostSeq; meaningful only with featureLostSeq.
	LostSeq uint64 `json:"ls,omitempty"`
	// Backlogs carried for nodes that left (Carry): [key, seq] or, once
	// some of it is delivered, [key, seq, acked] (older versions read the
	// first two).
	Carried [][]uint64 `json:"c,omitempty"`
	// Scrape configuration ids (ConfigIDs); absent in older versions.
	ConfigCur  uint64 `json:"cc,omitempty"`
	ConfigPrev uint64 `json:"cp,omitempty"`
	// Seq counts the node's metadata changes within one life, so that a
	// peer keeps the newest of what gossip and pushes bring (metapush.go);
	// Features says what the node reads (featureMetaPush,
	// featureWeightDeltas) and announces (featureLostSeq,
	// featureContinued, featureFinal). Absent in older
	// versions.
	Seq      uint64 `json:"q,omitempty"`
	Features uint64 `json:"f,omitempty"`
	// Config.Capabilities; absent in older versions.
	Caps uint64 `json:"k,omitempty"`
}

// Carry says that a node holds, not yet delivered, the unsent samples that
// another node handed over when it left (package handover): the new owners
// of the leaver's targets keep holding their own samples until the carrier
// stops announcing it.
type Carry struct {
	// Of is CarryKey of the leaver's name and start time.
	Of uint64
	// Seq is the leaver's last fence whose samples the backlog holds.
	Seq uint64
	// Acked is the leaver's last fence whose samples are delivered (0:
	// none known): holds waiting for it or an earlier one need not wait
	// for the rest of the backlog.
	Acked uint64
}

// CarryKey names one life of a node in a Carry: a hash keeps the
// metadata short whatever the node name's length.
func CarryKey(node string, start time.Time) uint64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(start.UnixMilli()))
	return xxhash.Sum64String(node + "\xff" + string(b[:]))
}

func (m nodeMeta) carried() []Carry {
	if len(m.Carried) == 0 {
		return nil
	}
	out := make([]Carry, len(m.Carried))
	for i, c := range m.Carried {
		var v [3]uint64
		copy(v[:], c)
		out[i] = Carry{Of: v[0], Seq: v[1], Acked: v[2]}
	}
	return out
}

func carriedMeta(cs []Carry) [][]uint64 {
	if len(cs) == 0 {
		return nil
	}
	out := make([][]uint64, len(cs))
	for i, c := range cs {
		out[i] = []uint64{c.Of, c.Seq}
		if c.Acked != 0 {
			out[i] = append(out[i], c.Acked)
		}
	}
	return out
}

func (m nodeMeta) watermarks() Watermarks {
	w := Watermarks{FencedSeq: m.FencedSeq, FencedRing: m.FencedRing, AckedSeq: m.AckedSeq, FencedPlacement: m.FencedPlacement, LostSeq: m.LostSeq}
	if m.Features&featureLostSeq == 0 {
		w.LostSeq = m.FencedSeq
	}
	w.Continued = m.Features&featureContinued != 0
	w.Final = m.Features&featureFinal != 0
	return w
}

func (m nodeMeta) configIDs() ConfigIDs {
	return ConfigIDs{Cur: m.ConfigCur, Prev: m.ConfigPrev}
}

// marshal encodes the metadata in the current version.
func (m nodeMeta) marshal() []byte {
	m.Version = metaVersion
	b, _ := json.Marshal(m)
	return b
}

// decodeMeta parses a peer's metadata. A peer speaking garbage is reported
// by the error; the caller treats it as a viewer, which owns nothing.
func decodeMeta(b []byte) (nodeMeta, State, error) {
	var m nodeMeta
	if len(b) == 0 {
		return m, Viewer, fmt.Errorf("empty metadata")
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, Viewer, fmt.Errorf("bad metadata: %w", err)
	}
	if m.Version != metaVersion {
		return m, Viewer, fmt.Errorf("metadata version %d, want %d", m.Version, metaVersion)
	}
	st, err := ParseState(m.State)
	if err != nil {
		return m, Viewer, err
	}
	return m, st, nil
}
