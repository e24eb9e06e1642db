package cluster

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// refusedAndApart waits until target has refused at least twice for reason
// (the intruder keeps re-joining) and then checks that nobody merged.
func refusedAndApart(t *testing.T, target, intruder testNode, reason string) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, "refusals counted", func() error {
		if got := promtestutil.ToFloat64(target.metrics.refused.WithLabelValues(reason)); got < 2 {
			return fmt.Errorf("refused{reason=%s} = %v", reason, got)
		}
		return nil
	})
	for _, n := range []testNode{target, intruder} {
		if got := view(n.Node); got != n.cfg.NodeName+"=viewer" {
			t.Errorf("%s merged with a foreign node: sees %s", n.cfg.NodeName, got)
		}
	}
}

func TestDifferentClusterNamesNeverMerge(t *testing.T) {
	tn := newTestNet(t)
	cfgA := testConfig(tn, 1)
	cfgA.ClusterName = "prod"
	a := startNode(t, cfgA)

	cfgB := testConfig(tn, 2)
	cfgB.ClusterName = "staging"
	cfgB.Join = []string{tn.addr(1)}
	cfgB.RejoinInterval = 200 * time.Millisecond
	b := startNode(t, cfgB)
	refusedAndApart(t, a, b, refusedLabel)

	// Control: the same name merges.
	cfgC := testConfig(tn, 3)
	cfgC.ClusterName = "prod"
	cfgC.Join = []string{tn.addr(1)}
	c := startNode(t, cfgC)
	both := []testNode{a, c}
	testutil.Eventually(t, 10*time.Second, "same cluster name merges", converged(both, expectView(allStates(both, Viewer))))
}

func TestDifferentSecretKeysNeverMerge(t *testing.T) {
	tn := newTestNet(t)
	key1 := bytes.Repeat([]byte{1}, 32)
	key2 := bytes.Repeat([]byte{2}, 32)

	cfgA := testConfig(tn, 1)
	cfgA.SecretKey = key1
	a := startNode(t, cfgA)

	cfgB := testConfig(tn, 2)
	cfgB.SecretKey = key2
	cfgB.Join = []string{tn.addr(1)}
	cfgB.RejoinInterval = 200 * time.Millisecond
	b := startNode(t, cfgB)
	refusedAndApart(t, a, b, refusedEncryption)
	if got := promtestutil.ToFloat64(b.metrics.joins.WithLabelValues("success")); got != 0 {
		t.Errorf("b counted %v successful joins with the wrong key", got)
	}

	// No key at all is refused too.
	cfgN := testConfig(tn, 3)
	cfgN.Join = []string{tn.addr(1)}
	before := promtestutil.ToFloat64(a.metrics.refused.WithLabelValues(refusedEncryption))
	n := startNode(t, cfgN)
	testutil.Eventually(t, 10*time.Second, "plaintext join refused", func() error {
		if got := promtestutil.ToFloat64(a.metrics.refused.WithLabelValues(refusedEncryption)); got <= before {
			return fmt.Errorf("refused{reason=encryption} still %v", got)
		}
		return nil
	})
	if got := view(n.Node); got != "node-03=viewer" {
		t.Errorf("plaintext node merged: sees %s", got)
	}

	// Control: the same key merges.
	cfgC := testConfig(tn, 4)
	cfgC.SecretKey = key1
	cfgC.Join = []string{tn.addr(1)}
	c := startNode(t, cfgC)
	both := []testNode{a, c}
	testutil.Eventually(t, 10*time.Second, "same key merges", converged(both, expectView(allStates(both, Viewer))))
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"short key", func(c *Config) { c.SecretKey = []byte("0123456789") }, "16, 24 or 32 bytes"},
		{"listen without port", func(c *Config) { c.ListenAddr = "127.0.0.1" }, "listen address"},
		{"listen host name", func(c *Config) { c.ListenAddr = "localhost:7946" }, "must be an IP"},
		{"listen bad port", func(c *Config) { c.ListenAddr = "127.0.0.1:99999" }, "bad port"},
		{"advertise bad port", func(c *Config) { c.AdvertiseAddr = "10.0.0.1:x" }, "advertise address"},
		{"join bad port", func(c *Config) { c.Join = []string{"peers:abc"} }, "bad port"},
		{"join empty", func(c *Config) { c.Join = []string{"dns+"} }, "empty address"},
		{"join srv with port", func(c *Config) { c.Join = []string{"dnssrv+_x._tcp.peers:7946"} }, "dnssrv+"},
		{"negative rejoin", func(c *Config) { c.RejoinInterval = -time.Second }, "rejoin interval"},
		{"negative size", func(c *Config) { c.WaitForSize = -1 }, "wait-for-size"},
		{"long cluster name", func(c *Config) { c.ClusterName = strings.Repeat("x", 256) }, "cluster name"},
		{"long HTTP address", func(c *Config) { c.HTTPAddr = strings.Repeat("x", 300) }, "HTTP address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ListenAddr = "127.0.0.1:0"
			tc.mutate(&cfg)
			_, err := New(cfg, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestParseJoinForms(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want joinSpec
	}{
		{"peers.svc:7000", joinSpec{kind: joinHost, host: "peers.svc", port: 7000}},
		{"dns+peers.svc:7000", joinSpec{kind: joinHost, host: "peers.svc", port: 7000}},
		{"peers.svc", joinSpec{kind: joinHost, host: "peers.svc", port: 7946}},
		{"10.0.0.1", joinSpec{kind: joinHost, host: "10.0.0.1", port: 7946}},
		{"[::1]:7001", joinSpec{kind: joinHost, host: "::1", port: 7001}},
		{"dnssrv+_gossip._tcp.peers.svc", joinSpec{kind: joinSRV, host: "_gossip._tcp.peers.svc"}},
	} {
		got, err := parseJoin(tc.in, 7946)
		if err != nil {
			t.Errorf("parseJoin(%q): %v", tc.in, err)
			continue
		}
		tc.want.raw = tc.in
		if got != tc.want {
			t.Errorf("parseJoin(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestAdvertiseAddress(t *testing.T) {
	tn := newTestNet(t)

	// A specific listen IP is advertised as is.
	n := startNode(t, testConfig(tn, 1))
	if got := n.Self().Addr; got != tn.addr(1) {
		t.Errorf("advertised %s, want the listen address %s", got, tn.addr(1))
	}

	// An explicit host without port takes the listen port.
	cfg := testConfig(tn, 2)
	cfg.AdvertiseAddr = tn.ip(3)
	m := startNode(t, cfg)
	if got, want := m.Self().Addr, tn.ip(3)+":"+fmt.Sprint(tn.port); got != want {
		t.Errorf("advertised %s, want %s", got, want)
	}

	// A host name is resolved through the configured resolver.
	d := startDNS(t)
	d.setA("me.shoal.test", tn.ip(4))
	cfg = testConfig(tn, 5)
	cfg.AdvertiseAddr = "me.shoal.test:7000"
	cfg.Resolver = ResolverFor(d.addr)
	h := startNode(t, cfg)
	if got, want := h.Self().Addr, tn.ip(4)+":7000"; got != want {
		t.Errorf("advertised %s, want %s", got, want)
	}

	// The wildcard listen address advertises a real interface address.
	ip := defaultAdvertiseIP(nil)
	if ip == nil || ip.IsUnspecified() {
		t.Errorf("default advertise IP = %v", ip)
	}
	if got := defaultAdvertiseIP(ipOf("0.0.0.0")); !got.Equal(ip) {
		t.Errorf("default advertise IP for 0.0.0.0 = %v, want %v", got, ip)
	}
}

func TestStateNames(t *testing.T) {
	for _, s := range States {
		got, err := ParseState(s.String())
		if err != nil || got != s {
			t.Errorf("ParseState(%q) = %v, %v", s.String(), got, err)
		}
	}
	if Viewer.String() != "viewer" || Participant.String() != "participant" || Terminating.String() != "terminating" {
		t.Error("state names changed; they are part of the gossip and metrics contract")
	}
	if _, _, err := decodeMeta([]byte("garbage")); err == nil {
		t.Error("decodeMeta accepted garbage")
	}
	m, st, err := decodeMeta(encodeMeta(Participant, "h:1", time.UnixMilli(42), 7))
	if err != nil || st != Participant || m.HTTPAddr != "h:1" || m.StartTime != 42 || m.Lamport != 7 {
		t.Errorf("metadata round trip: %+v %v %v", m, st, err)
	}
}

func ipOf(s string) net.IP { return net.ParseIP(s) }

// garbageMeta is a memberlist delegate that gossips undecodable metadata.
type garbageMeta struct{}

func (garbageMeta) NodeMeta(int) []byte             { return []byte("\x00not json") }
func (garbageMeta) NotifyMsg([]byte)                {}
func (garbageMeta) GetBroadcasts(int, int) [][]byte { return nil }
func (garbageMeta) LocalState(bool) []byte          { return nil }
func (garbageMeta) MergeRemoteState([]byte, bool)   {}

// A peer speaking garbage metadata is counted and treated as a viewer; the
// node keeps running.
func TestGarbageMetadataPeerIsAViewer(t *testing.T) {
	tn := newTestNet(t)
	n := startNode(t, testConfig(tn, 1))
	n.SetState(Participant)

	mc := memberlist.DefaultLANConfig()
	fastTimings(mc)
	mc.Name = "weird"
	mc.BindAddr = tn.ip(2)
	mc.BindPort = tn.port
	mc.AdvertiseAddr = tn.ip(2)
	mc.AdvertisePort = tn.port
	mc.Delegate = garbageMeta{}
	mc.LogOutput = io.Discard
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Shutdown()
	if _, err := ml.Join([]string{tn.addr(1)}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "weird peer seen as viewer", func() error {
		if got := view(n.Node); got != "node-01=participant,weird=viewer" {
			return fmt.Errorf("sees %s", got)
		}
		return nil
	})
	if got := promtestutil.ToFloat64(n.metrics.badMeta); got < 1 {
		t.Errorf("bad metadata counter = %v", got)
	}
}
