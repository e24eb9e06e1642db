package cluster

import (
	"bytes"
	"compress/lzw"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// memberlist v0.7.0 message types (net.go), for hand-made messages.
const (
	mlPing     = 0
	mlAlive    = 4
	mlPushPull = 6
	mlCompound = 7
	mlCompress = 9
	mlEncrypt  = 10
	mlHasCRC   = 12
	mlLabel    = 244
)

// wire builds what memberlist expects on the wire. A packet is
// [label header] [encrypted plain] with the label as authenticated data; a
// stream is [label header] [encryptMsg] [length] [encrypted plain] with the
// first five bytes and the label as authenticated data. A nil key leaves the
// message in clear.
type wire struct {
	label string
	key   []byte
}

func (w wire) labelHeader() []byte {
	if w.label == "" {
		return nil
	}
	return append([]byte{mlLabel, byte(len(w.label))}, w.label...)
}

func seal(key, plain, ad []byte) []byte {
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	nonce := make([]byte, gcm.NonceSize())
	rand.Read(nonce)
	out := append([]byte{1}, nonce...) // encryption version 1: no padding
	return gcm.Seal(out, nonce, plain, ad)
}

func (w wire) packet(plain []byte) []byte {
	body := plain
	if w.key != nil {
		body = seal(w.key, plain, []byte(w.label))
	}
	return append(w.labelHeader(), body...)
}

func (w wire) stream(plain []byte) []byte {
	if w.key == nil {
		return append(w.labelHeader(), plain...)
	}
	head := make([]byte, 5)
	head[0] = mlEncrypt
	binary.BigEndian.PutUint32(head[1:], uint32(1+12+len(plain)+16))
	body := seal(w.key, plain, append(bytes.Clone(head), w.label...))
	return append(append(w.labelHeader(), head...), body...)
}

// msgpack encoding, by hand, of the few shapes the tests need.
func mpStr(s string) []byte { return append([]byte{0xd9, byte(len(s))}, s...) }
func mpUint(v uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{0xce}, v)
}

// pingMsg is a well-formed memberlist ping for node.
func pingMsg(seq uint32, node string) []byte {
	b := []byte{mlPing, 0x82}
	b = append(b, mpStr("SeqNo")...)
	b = append(b, mpUint(seq)...)
	b = append(b, mpStr("Node")...)
	return append(b, mpStr(node)...)
}

// pushPullClaiming is a push/pull header announcing nodes states.
func pushPullClaiming(nodes uint32) []byte {
	b := []byte{mlPushPull, 0x83}
	b = append(b, mpStr("Nodes")...)
	b = append(b, mpUint(nodes)...)
	b = append(b, mpStr("UserStateLen")...)
	b = append(b, 0)
	b = append(b, mpStr("Join")...)
	return append(b, 0xc2)
}

// zipBomb is a compressMsg that inflates past memberlist's 40 MiB limit.
func zipBomb() []byte {
	var z bytes.Buffer
	w := lzw.NewWriter(&z, lzw.LSB, 8)
	w.Write(make([]byte, 41<<20+1))
	w.Close()
	b := []byte{mlCompress, 0x82}
	b = append(b, mpStr("Algo")...)
	b = append(b, 0)
	b = append(b, mpStr("Buf")...)
	b = append(b, 0xc6)
	b = binary.BigEndian.AppendUint32(b, uint32(z.Len()))
	return append(b, z.Bytes()...)
}

func refusedCounts(t *testing.T, n testNode) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, r := range refusalReasons {
		v, err := testutil.GatherValue(n.reg, "shoal_cluster_refused_messages_total", map[string]string{"reason": r})
		if err != nil {
			t.Fatal(err)
		}
		out[r] = v
	}
	return out
}

func eventValue(t *testing.T, n testNode, event string) float64 {
	t.Helper()
	v, err := testutil.GatherValue(n.reg, "cluster_node_gossip_received_events_total", map[string]string{"event": event})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// gossipClient sends hand-made gossip to a node the way a peer would: as
// UDP datagrams and TCP streams, or as packets and streams over TLS.
type gossipClient interface {
	// packets sends data as one packet, n times.
	packets(t *testing.T, data []byte, n int)
	// stream opens a stream and writes data to it.
	stream(t *testing.T, data []byte) net.Conn
	// pingAnswered sends a well-formed ping and waits for the ack: the
	// control that the hand-made envelope is right and that the node still
	// answers.
	pingAnswered(t *testing.T) error
}

// plainClient speaks memberlist's own UDP and TCP.
type plainClient struct {
	target string
	w      wire
}

func (p plainClient) packets(t *testing.T, data []byte, n int) {
	c, err := net.Dial("udp", p.target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range n {
		if _, err := c.Write(data); err != nil {
			t.Fatal(err)
		}
	}
}

func (p plainClient) stream(t *testing.T, data []byte) net.Conn {
	c, err := net.Dial("tcp", p.target)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	return c
}

func (p plainClient) pingAnswered(t *testing.T) error {
	t.Helper()
	c, err := net.Dial("udp", p.target)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(p.w.packet(pingMsg(4242, "node-01"))); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 65536)
	if _, err := c.Read(buf); err != nil {
		return fmt.Errorf("no ack: %w", err)
	}
	return nil
}

// rawSender is a gossipClient with protos of its own transport.
type rawSender interface {
	send(t *testing.T, proto string, data []byte) net.Conn
}

// badInputCase is one hostile or broken message and the reason it must be
// refused with. proto is "packet", "packet-burst" (sent 100 times) or
// "stream".
type badInputCase struct {
	name   string
	proto  string
	data   []byte
	reason string
}

// badInputCases are the messages every transport must refuse, in the
// envelope good (label "prod" and key), wrongKey being another key.
func badInputCases(good wire, wrongKey []byte) []badInputCase {
	key := good.key
	garbage := bytes.Repeat([]byte("\x01garbage\xff"), 20)
	bigGarbage := bytes.Repeat([]byte{0xff}, 60000)
	hugeLen := append(append(good.labelHeader(), mlEncrypt), 0xff, 0xff, 0xff, 0xf0)
	compound := []byte{mlCompound, 5, 0, 1} // five parts announced, half a length given
	badCRC := append([]byte{mlHasCRC, 0, 0, 0, 0}, pingMsg(1, "node-01")...)
	// 255 undecodable alive messages in one packet: memberlist queues each
	// for its handler, which cannot keep up with a burst of these.
	flood := []byte{mlCompound, 255}
	for range 255 {
		flood = binary.BigEndian.AppendUint16(flood, 2)
	}
	for range 255 {
		flood = append(flood, mlAlive, 0xc1)
	}
	return []badInputCase{
		{"udp garbage", "packet", garbage, refusedLabel},
		{"udp largest datagram of garbage", "packet", bigGarbage, refusedLabel},
		{"udp truncated label header", "packet", []byte{mlLabel, 10, 'p'}, refusedMalformed},
		{"udp empty label header", "packet", []byte{mlLabel, 0, 1, 2}, refusedMalformed},
		{"udp wrong cluster name", "packet", wire{"staging", key}.packet(pingMsg(1, "node-01")), refusedLabel},
		{"udp no label", "packet", wire{"", key}.packet(pingMsg(1, "node-01")), refusedLabel},
		{"udp unencrypted", "packet", wire{"prod", nil}.packet(pingMsg(1, "node-01")), refusedEncryption},
		{"udp wrong key", "packet", wire{"prod", wrongKey}.packet(pingMsg(1, "node-01")), refusedEncryption},
		{"udp unknown message type", "packet", good.packet(garbage[1:]), refusedMalformed},
		{"udp empty message", "packet", good.packet(nil), refusedMalformed},
		{"udp truncated ping", "packet", good.packet(pingMsg(1, "node-01")[:9]), refusedMalformed},
		{"udp bad checksum", "packet", good.packet(badCRC), refusedMalformed},
		{"udp truncated compound", "packet", good.packet(compound), refusedMalformed},
		{"udp largest datagram, encrypted garbage", "packet", good.packet(bigGarbage[:60000-60]), refusedMalformed},
		{"udp decompression bomb", "packet", good.packet(zipBomb()), refusedOversized},
		{"udp burst of 100 × 255 queued messages", "packet-burst", good.packet(flood), refusedOverload},

		{"tcp garbage", "stream", garbage, refusedLabel},
		{"tcp truncated label header", "stream", []byte{mlLabel}, refusedMalformed},
		{"tcp wrong cluster name", "stream", wire{"staging", key}.stream(pushPullClaiming(0)), refusedLabel},
		{"tcp unencrypted", "stream", wire{"prod", nil}.stream(pushPullClaiming(0)), refusedEncryption},
		{"tcp wrong key", "stream", wire{"prod", wrongKey}.stream(pushPullClaiming(0)), refusedEncryption},
		{"tcp announced length over limit", "stream", hugeLen, refusedOversized},
		{"tcp push/pull claiming 2M nodes", "stream", good.stream(pushPullClaiming(2 << 20)), refusedOversized},
		{"tcp unknown message type", "stream", good.stream([]byte{200, 1, 2, 3}), refusedMalformed},
		{"tcp undecodable ping", "stream", good.stream([]byte{mlPing, 0xc1, 0xc1}), refusedMalformed},
		{"tcp stalled after the label (slow loris)", "stream", good.labelHeader(), refusedTimeout},
	}
}

// TestGossipBadInput throws hostile and broken packets and streams at a real
// node of a labelled, encrypted two-node cluster from a raw UDP and TCP
// client. Each must be refused and counted under its reason, and the node
// must keep its view and keep answering.
func TestGossipBadInput(t *testing.T) {
	tn := newTestNet(t)
	key := bytes.Repeat([]byte{7}, 32)
	good := wire{label: "prod", key: key}
	var cfgs [2]Config
	for i := range cfgs {
		cfgs[i] = testConfig(tn, i+1)
		cfgs[i].ClusterName, cfgs[i].SecretKey = "prod", key
	}
	member := func(i int, name string, d memberlist.Delegate) *memberlist.Memberlist {
		return rawMember(t, tn, i, name, "prod", key, d, nil)
	}
	runGossipBadInput(t, tn, cfgs, plainClient{target: tn.addr(1), w: good}, badInputCases(good, bytes.Repeat([]byte{8}, 32)), member)
}

// runGossipBadInput starts a two-node cluster from cfgs, throws cases at
// node 1 through client, then checks how node 1 handles a peer claiming
// its name and a peer flapping its state (both made by member), and that
// it kept its view and health.
func runGossipBadInput(t *testing.T, tn testNet, cfgs [2]Config, client gossipClient, cases []badInputCase, member func(i int, name string, d memberlist.Delegate) *memberlist.Memberlist) {
	a := startNode(t, cfgs[0])
	a.SetState(Participant)
	cfgB := cfgs[1]
	cfgB.Join = []string{tn.addr(1)}
	b := startNode(t, cfgB)
	b.SetState(Participant)
	both := []testNode{a, b}
	want := "node-01=participant,node-02=participant"
	testutil.Eventually(t, 10*time.Second, "cluster formed", converged(both, want))

	if err := client.pingAnswered(t); err != nil {
		t.Fatalf("control ping in the test's own envelope: %v", err)
	}
	for _, tc := range cases {
		before := refusedCounts(t, a)
		switch tc.proto {
		case "packet":
			client.packets(t, tc.data, 1)
		case "packet-burst":
			client.packets(t, tc.data, 100)
		default:
			var c net.Conn
			if tc.proto == "stream" {
				c = client.stream(t, tc.data)
			} else if rs, ok := client.(rawSender); ok {
				c = rs.send(t, tc.proto, tc.data)
			} else {
				t.Fatalf("%s: unknown proto %q", tc.name, tc.proto)
			}
			if tc.reason == refusedTimeout {
				// The node must close a stalled stream itself, after its TCP
				// timeout (2s here), without the client's help.
				start := time.Now()
				c.SetReadDeadline(time.Now().Add(15 * time.Second))
				_, err := io.Copy(io.Discard, c)
				// Closed by the node: EOF, or over TLS possibly an error
				// about the torn connection; only our own deadline is not.
				var ne net.Error
				if (errors.As(err, &ne) && ne.Timeout()) || time.Since(start) > 10*time.Second {
					t.Errorf("%s: stalled stream not closed by the node: %v after %v", tc.name, err, time.Since(start))
				}
			}
			c.Close()
		}
		wait := 10 * time.Second
		if tc.reason == refusedOversized && tc.proto == "packet" {
			wait = time.Minute // inflating 40 MiB is slow under the race detector
		}
		testutil.Eventually(t, wait, tc.name+" counted", func() error {
			now := refusedCounts(t, a)
			if now[tc.reason] <= before[tc.reason] {
				return fmt.Errorf("refused{reason=%q} still %v; all: %v", tc.reason, now[tc.reason], now)
			}
			return nil
		})
		t.Logf("%-45s -> refused{reason=%q}", tc.name, tc.reason)
	}

	// A second node claiming node-01's name is ignored and counted, and
	// node-01 shows the conflict.
	conflicts := eventValue(t, a, eventNodeConflict)
	impostor := member(3, "node-01", nil)
	testutil.Eventually(t, 10*time.Second, "name conflict counted", func() error {
		if got := eventValue(t, a, eventNodeConflict); got <= conflicts {
			return fmt.Errorf("node_conflict events still %v", got)
		}
		return nil
	})
	c, ok := a.LastConflict()
	if !ok || c.Name != "node-01" || !c.Self || c.ExistingAddr != tn.addr(1) || c.OtherAddr != tn.addr(3) {
		t.Errorf("LastConflict = %+v, %v; want node-01 kept at %s, the other at %s", c, ok, tn.addr(1), tn.addr(3))
	}
	impostor.Shutdown()

	// A peer flapping its state: every change is an update event, the peer
	// stays a member, and its last state wins everywhere.
	updates := eventValue(t, a, "update")
	meta := &flappingMeta{}
	meta.set(Viewer)
	flapper := member(4, "flapper", meta)
	const flaps = 60
	for i := range flaps {
		meta.set([]State{Participant, Viewer}[i%2])
		flapper.UpdateNode(0)
	}
	meta.set(Participant)
	flapper.UpdateNode(0)
	withFlapper := "flapper=participant,node-01=participant,node-02=participant"
	testutil.Eventually(t, 15*time.Second, "flapper's last state wins", converged(both, withFlapper))
	if got := eventValue(t, a, "update"); got-updates < 2 {
		t.Errorf("flapping counted as %v update events", got-updates)
	}
	if err := flapper.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	flapper.Shutdown()

	// The node kept its view and its health, and still answers.
	testutil.Eventually(t, 15*time.Second, "view kept", converged(both, want))
	testutil.Eventually(t, 15*time.Second, "healthy", func() error {
		if h := a.memberlist().GetHealthScore(); h != 0 {
			return fmt.Errorf("health score %d", h)
		}
		return nil
	})
	if err := client.pingAnswered(t); err != nil {
		t.Errorf("after the bad input: %v", err)
	}
}

// flappingMeta gossips shoal metadata with a state the test changes.
type flappingMeta struct {
	mu   sync.Mutex
	meta []byte
}

func (f *flappingMeta) set(s State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.meta = encodeMeta(s, "", time.Now(), 0)
}

func (f *flappingMeta) NodeMeta(int) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.meta
}

func (f *flappingMeta) NotifyMsg([]byte)                {}
func (f *flappingMeta) GetBroadcasts(int, int) [][]byte { return nil }
func (f *flappingMeta) LocalState(bool) []byte          { return nil }
func (f *flappingMeta) MergeRemoteState([]byte, bool)   {}

// rawMember is a plain memberlist (not a shoal node) on tn's address i that
// joins node 1, over tr if not nil.
func rawMember(t *testing.T, tn testNet, i int, name, label string, key []byte, d memberlist.Delegate, tr memberlist.Transport) *memberlist.Memberlist {
	t.Helper()
	mc := memberlist.DefaultLANConfig()
	fastTimings(mc)
	mc.Transport = tr
	mc.Name = name
	mc.BindAddr, mc.AdvertiseAddr = tn.ip(i), tn.ip(i)
	mc.BindPort, mc.AdvertisePort = tn.port, tn.port
	mc.Label, mc.SecretKey = label, key
	mc.Delegate = d
	mc.LogOutput = io.Discard
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ml.Shutdown() })
	if _, err := ml.Join([]string{tn.addr(1)}); err != nil {
		t.Fatalf("%s joining: %v", name, err)
	}
	return ml
}
