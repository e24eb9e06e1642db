package cluster

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// tlsFiles writes a certificate for name signed by ca, and a CA file
// trusting the given CAs (ca alone if none), into a new directory.
func tlsFiles(t *testing.T, ca *testutil.CA, name string, o testutil.LeafOptions, trust ...*testutil.CA) TLSConfig {
	t.Helper()
	dir := t.TempDir()
	c := TLSConfig{
		CAFile:   filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "tls.crt"),
		KeyFile:  filepath.Join(dir, "tls.key"),
	}
	writeTrust(t, c.CAFile, append(trust, ca)[:max(len(trust), 1)]...)
	ca.Issue(t, name, c.CertFile, c.KeyFile, o)
	return c
}

func writeTrust(t *testing.T, path string, cas ...*testutil.CA) {
	t.Helper()
	var b []byte
	for _, ca := range cas {
		b = append(b, ca.PEM...)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsTestConfig is node i of tn over TLS with a certificate from ca.
func tlsTestConfig(t *testing.T, tn testNet, i int, ca *testutil.CA) Config {
	cfg := testConfig(tn, i)
	cfg.TLS = tlsFiles(t, ca, cfg.NodeName, testutil.LeafOptions{})
	return cfg
}

// refusedMore waits until n has counted at least want more refusals for
// reason than before.
func refusedMore(t *testing.T, n testNode, reason string, before float64, want float64) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, "refusals counted", func() error {
		if got := promtestutil.ToFloat64(n.metrics.refused.WithLabelValues(reason)); got-before < want {
			return fmt.Errorf("refused{reason=%s} = %v, was %v", reason, got, before)
		}
		return nil
	})
}

func alone(t *testing.T, nodes ...testNode) {
	t.Helper()
	for _, n := range nodes {
		if got := view(n.Node); got != n.cfg.NodeName+"=viewer" {
			t.Errorf("%s merged with a refused node: sees %s", n.cfg.NodeName, got)
		}
	}
}

// A cluster forms over TLS alone: no UDP socket is bound, state changes
// (packets) and joins (streams) go through TLS connections.
func TestGossipOverTLSFormsCluster(t *testing.T) {
	tn := newTestNet(t)
	ca := testutil.NewCA(t, "shoal gossip CA")
	var nodes []testNode
	for i := 1; i <= 3; i++ {
		cfg := tlsTestConfig(t, tn, i, ca)
		if i > 1 {
			cfg.Join = []string{tn.addr(1)}
		}
		nodes = append(nodes, startNode(t, cfg))
	}
	if got := nodes[0].Encryption(); got != "tls" {
		t.Errorf("Encryption() = %q, want tls", got)
	}
	testutil.Eventually(t, 15*time.Second, "cluster formed", converged(nodes, expectView(allStates(nodes, Viewer))))
	for _, n := range nodes {
		if err := n.SetState(Participant); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 15*time.Second, "states gossiped", converged(nodes, expectView(allStates(nodes, Participant))))
	// Nothing listens for UDP: a plaintext datagram has nowhere to go.
	if pc, err := net.ListenPacket("udp", tn.addr(1)); err != nil {
		t.Errorf("the gossip UDP port is bound over TLS: %v", err)
	} else {
		pc.Close()
	}
	// Failure detection works over the packet connections: a stopped node
	// is declared gone.
	nodes[2].Shutdown()
	testutil.Eventually(t, 20*time.Second, "stopped node removed", converged(nodes[:2], expectView(allStates(nodes[:2], Participant))))
}

// Peers whose certificate comes from another CA, has expired, or that
// present none (plain memberlist, or TLS without a certificate) are refused
// and counted; none of them merges.
func TestGossipTLSRefusesBadPeers(t *testing.T) {
	tn := newTestNet(t)
	ca := testutil.NewCA(t, "shoal gossip CA")
	other := testutil.NewCA(t, "another CA")
	a := startNode(t, tlsTestConfig(t, tn, 1, ca))

	t.Run("certificate from another CA", func(t *testing.T) {
		cfg := testConfig(tn, 2)
		// It trusts node 1, so only node 1's check can refuse it.
		cfg.TLS = tlsFiles(t, other, cfg.NodeName, testutil.LeafOptions{}, ca, other)
		cfg.Join, cfg.RejoinInterval = []string{tn.addr(1)}, 200*time.Millisecond
		before := promtestutil.ToFloat64(a.metrics.refused.WithLabelValues(refusedTLS))
		b := startNode(t, cfg)
		refusedMore(t, a, refusedTLS, before, 2)
		alone(t, a, b)
		b.Shutdown()
	})
	t.Run("expired certificate", func(t *testing.T) {
		cfg := testConfig(tn, 3)
		cfg.TLS = tlsFiles(t, ca, cfg.NodeName, testutil.LeafOptions{
			NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour),
		})
		cfg.Join, cfg.RejoinInterval = []string{tn.addr(1)}, 200*time.Millisecond
		before := promtestutil.ToFloat64(a.metrics.refused.WithLabelValues(refusedTLS))
		c := startNode(t, cfg)
		refusedMore(t, a, refusedTLS, before, 2)
		alone(t, a, c)
		c.Shutdown()
	})
	t.Run("plain memberlist, no TLS", func(t *testing.T) {
		cfg := testConfig(tn, 4)
		cfg.Join, cfg.RejoinInterval = []string{tn.addr(1)}, 200*time.Millisecond
		before := promtestutil.ToFloat64(a.metrics.refused.WithLabelValues(refusedTLS))
		d := startNode(t, cfg)
		refusedMore(t, a, refusedTLS, before, 2)
		alone(t, a, d)
		d.Shutdown()
	})
	t.Run("TLS without a client certificate", func(t *testing.T) {
		before := promtestutil.ToFloat64(a.metrics.refused.WithLabelValues(refusedTLS))
		c, err := tls.Dial("tcp", tn.addr(1), &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			// TLS 1.3: the client finishes before the server checks it;
			// the refusal arrives on the first read.
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("connection without a certificate: err = %v, want a certificate alert", err)
		}
		refusedMore(t, a, refusedTLS, before, 1)
	})
	alone(t, a)
}

// Certificate and CA files replaced on disk are used for new connections
// without a restart: node 1 moves to a new CA; a node that trusts only the
// new CA is refused before and merges after.
func TestGossipTLSRotatedCertificateUsed(t *testing.T) {
	tn := newTestNet(t)
	oldCA := testutil.NewCA(t, "old CA")
	newCA := testutil.NewCA(t, "new CA")
	cfgA := tlsTestConfig(t, tn, 1, oldCA)
	a := startNode(t, cfgA)

	cfgB := testConfig(tn, 2)
	cfgB.TLS = tlsFiles(t, newCA, cfgB.NodeName, testutil.LeafOptions{})
	cfgB.Join, cfgB.RejoinInterval = []string{tn.addr(1)}, 200*time.Millisecond
	b := startNode(t, cfgB)
	refusedMore(t, a, refusedTLS, 0, 2)
	alone(t, a, b)

	// Rotate node 1: trust both CAs, present a certificate from the new one.
	writeTrust(t, cfgA.TLS.CAFile, oldCA, newCA)
	newCA.Issue(t, cfgA.NodeName, cfgA.TLS.CertFile, cfgA.TLS.KeyFile, testutil.LeafOptions{})
	both := []testNode{a, b}
	testutil.Eventually(t, 20*time.Second, "merged after rotation", converged(both, expectView(allStates(both, Viewer))))
}

// A rotation caught half-way (the key replaced, the certificate not yet)
// keeps the previous certificate and reports the error; the complete pair
// is picked up on the next check.
func TestTLSCredsKeepPreviousOnHalfRotation(t *testing.T) {
	ca := testutil.NewCA(t, "CA")
	cfg := tlsFiles(t, ca, "n", testutil.LeafOptions{})
	var reloadErrs []error
	c, err := newTLSCreds(cfg, func(err error) { reloadErrs = append(reloadErrs, err) })
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c.now = func() time.Time { return now }
	first := c.current().cert.Leaf.SerialNumber

	// A new pair written elsewhere; only its key is moved in.
	dir := t.TempDir()
	ca.Issue(t, "n", filepath.Join(dir, "c"), filepath.Join(dir, "k"), testutil.LeafOptions{})
	copyFile(t, filepath.Join(dir, "k"), cfg.KeyFile)
	now = now.Add(credsRecheck)
	if got := c.current().cert.Leaf.SerialNumber; got.Cmp(first) != 0 {
		t.Errorf("half-rotated pair replaced the certificate")
	}
	if len(reloadErrs) != 1 {
		t.Errorf("reload errors = %v, want one", reloadErrs)
	}
	copyFile(t, filepath.Join(dir, "c"), cfg.CertFile)
	if got := c.current().cert.Leaf.SerialNumber; got.Cmp(first) != 0 {
		t.Errorf("files read again before %s", credsRecheck)
	}
	now = now.Add(credsRecheck)
	if got := c.current().cert.Leaf.SerialNumber; got.Cmp(first) == 0 {
		t.Errorf("completed rotation not picked up")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTLSConfigValidation(t *testing.T) {
	ca := testutil.NewCA(t, "CA")
	good := tlsFiles(t, ca, "n", testutil.LeafOptions{})
	for _, tc := range []struct {
		name   string
		mutate func(*TLSConfig)
		want   string
	}{
		{"CA without certificate", func(c *TLSConfig) { c.CertFile, c.KeyFile = "", "" }, "without a certificate file"},
		{"no key", func(c *TLSConfig) { c.KeyFile = "" }, "needs a CA file"},
		{"no CA", func(c *TLSConfig) { c.CAFile = "" }, "needs a CA file"},
		{"TLS 1.1", func(c *TLSConfig) { c.MinVersion = tls.VersionTLS11 }, "minimum version"},
		{"missing file", func(c *TLSConfig) { c.CertFile += ".missing" }, "reading TLS file"},
		{"key of another certificate", func(c *TLSConfig) { c.KeyFile = tlsFiles(t, ca, "m", testutil.LeafOptions{}).KeyFile }, "tls.crt and key"},
		{"CA file without certificates", func(c *TLSConfig) { c.CAFile = c.KeyFile }, "holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ListenAddr = "127.0.0.1:0"
			cfg.TLS = good
			tc.mutate(&cfg.TLS)
			_, err := New(cfg, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// tlsClient sends hand-made gossip over the TLS transport's framing with a
// valid certificate: the worst case, a peer that holds one.
type tlsClient struct {
	target string
	self   string // the sender address it announces
	w      wire
	cfg    *tls.Config
}

func (c tlsClient) dial(t *testing.T, kind byte) *tls.Conn {
	t.Helper()
	conn, err := tls.Dial("tcp", c.target, c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	hdr := []byte{kind}
	if kind == connPacket {
		hdr = append(append(hdr, byte(len(c.self))), c.self...)
	}
	if _, err := conn.Write(hdr); err != nil {
		t.Fatal(err)
	}
	return conn
}

func (c tlsClient) packets(t *testing.T, data []byte, n int) {
	conn := c.dial(t, connPacket)
	defer conn.Close()
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	frame = append(frame, data...)
	for range n {
		if _, err := conn.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
}

func (c tlsClient) stream(t *testing.T, data []byte) net.Conn {
	conn := c.dial(t, connStream)
	if _, err := conn.Write(data); err != nil {
		t.Fatal(err)
	}
	return conn
}

// pingAnswered pings over a stream, which memberlist answers on the same
// stream (packets have no way back to this client).
func (c tlsClient) pingAnswered(t *testing.T) error {
	t.Helper()
	conn := c.stream(t, c.w.stream(pingMsg(4242, "node-01")))
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 64)); err != nil {
		return fmt.Errorf("no ack: %w", err)
	}
	return nil
}

// The bad-input cases of TestGossipBadInput over TLS, from a peer with a
// valid certificate, in a cluster that also uses a key and a label, plus
// what only the TLS transport can receive: a packet frame of a bad size, a
// connection of an unknown kind, a stalled handshake and plaintext.
func TestGossipBadInputOverTLS(t *testing.T) {
	tn := newTestNet(t)
	ca := testutil.NewCA(t, "shoal gossip CA")
	key := bytes.Repeat([]byte{7}, 32)
	good := wire{label: "prod", key: key}
	var cfgs [2]Config
	for i := range cfgs {
		cfgs[i] = tlsTestConfig(t, tn, i+1, ca)
		cfgs[i].ClusterName, cfgs[i].SecretKey = "prod", key
	}
	clientFiles := tlsFiles(t, ca, "hostile", testutil.LeafOptions{})
	creds, err := newTLSCreds(clientFiles, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := tlsClient{target: tn.addr(1), self: tn.addr(9), w: good, cfg: creds.clientConfig()}
	member := func(i int, name string, d memberlist.Delegate) *memberlist.Memberlist {
		tr, err := newTLSTransport(tn.addr(i), creds, 2*time.Second, testLogger(t, name), func(string) {})
		if err != nil {
			t.Fatal(err)
		}
		return rawMember(t, tn, i, name, "prod", key, d, tr)
	}
	oversized := binary.BigEndian.AppendUint32(nil, maxPacket+1)
	cases := append(badInputCases(good, bytes.Repeat([]byte{8}, 32)),
		badInputCase{"tls packet frame over 64 KiB", "raw-packet", oversized, refusedOversized},
		badInputCase{"tls empty packet frame", "raw-packet", []byte{0, 0, 0, 0}, refusedMalformed},
		badInputCase{"tls connection of unknown kind", "raw-kind", []byte{'x'}, refusedMalformed},
		badInputCase{"tls packet connection with a bad sender", "raw-kind", []byte{connPacket, 3, 'a', 'b', 'c'}, refusedMalformed},
		badInputCase{"tls handshake stalled", "tcp", nil, refusedTimeout},
		badInputCase{"plaintext memberlist stream", "tcp", good.stream(pushPullClaiming(0)), refusedTLS},
	)
	runGossipBadInput(t, tn, cfgs, tlsRawClient{tlsClient: client}, cases, member)
	if got := nodeEncryption(cfgs[0]); got != "tls+key" {
		t.Errorf("encryption = %q, want tls+key", got)
	}
}

func nodeEncryption(cfg Config) string {
	cfg.ListenAddr = "127.0.0.1:0"
	n, err := New(cfg, nil, nil)
	if err != nil {
		return err.Error()
	}
	return n.Encryption()
}

// tlsRawClient adds the protos that only the TLS transport's own framing
// has: "raw-packet" writes data after a packet connection's header,
// "raw-kind" writes data as the connection's header, "tcp" writes data to
// the port without TLS.
type tlsRawClient struct{ tlsClient }

// send handles the TLS-only protos (see rawSender).
func (c tlsRawClient) send(t *testing.T, proto string, data []byte) net.Conn {
	t.Helper()
	switch proto {
	case "raw-packet":
		conn := c.dial(t, connPacket)
		if _, err := conn.Write(data); err != nil {
			t.Fatal(err)
		}
		return conn
	case "raw-kind":
		conn, err := tls.Dial("tcp", c.target, c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(data); err != nil {
			t.Fatal(err)
		}
		return conn
	case "tcp":
		conn, err := net.Dial("tcp", c.target)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(data); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	t.Fatalf("unknown proto %q", proto)
	return nil
}
