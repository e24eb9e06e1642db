package cluster

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// credsRecheck bounds how often the certificate files are read again: at
// most once per second, on a handshake, so that a rotated certificate is
// used by new connections within a second without a watcher goroutine.
const credsRecheck = time.Second

// TLSConfig turns gossip over TLS on when CertFile is set: every gossip
// packet and stream then goes over a TLS connection, and each side must
// present a certificate signed by the CA in CAFile (mutual TLS). The files
// are read again on new connections when they change on disk, so a rotated
// certificate needs no restart.
type TLSConfig struct {
	// CAFile holds the PEM certificates of the CAs that sign peers'
	// certificates. Required with CertFile.
	CAFile string
	// CertFile and KeyFile hold this node's PEM certificate (chain) and
	// private key; the certificate is presented to every peer, as a server
	// and as a client.
	CertFile string
	KeyFile  string
	// ServerName, when set, must be a DNS name of every peer's certificate;
	// empty checks only that the certificate is signed by the CA (peers are
	// dialled by IP address, which certificates seldom name).
	ServerName string
	// MinVersion is the lowest TLS version accepted, tls.VersionTLS12 or
	// tls.VersionTLS13. Default: TLS 1.3 (every peer is shoal).
	MinVersion uint16
}

// Enabled reports whether gossip goes over TLS.
func (c TLSConfig) Enabled() bool { return c.CertFile != "" }

func (c *TLSConfig) normalize() error {
	if !c.Enabled() {
		if c.CAFile != "" || c.KeyFile != "" || c.ServerName != "" {
			return errors.New("cluster: TLS CA file, key file or server name set without a certificate file")
		}
		return nil
	}
	if c.CAFile == "" || c.KeyFile == "" {
		return errors.New("cluster: gossip over TLS needs a CA file, a certificate file and a key file")
	}
	switch c.MinVersion {
	case 0:
		c.MinVersion = tls.VersionTLS13
	case tls.VersionTLS12, tls.VersionTLS13:
	default:
		return fmt.Errorf("cluster: TLS minimum version %#x: only TLS 1.2 and 1.3 are allowed", c.MinVersion)
	}
	return nil
}

// tlsMaterial is one parsed set of files.
type tlsMaterial struct {
	cert *tls.Certificate
	pool *x509.CertPool
	// raw are the file contents the material was parsed from.
	raw [3][]byte
}

// tlsCreds holds the current certificate, key and CA pool and reloads them
// when their files change.
type tlsCreds struct {
	cfg TLSConfig
	now func() time.Time
	// onReloadError reports files that changed but do not load (a
	// half-written rotation, say); the previous material stays in use.
	onReloadError func(error)

	mu      sync.Mutex
	cur     *tlsMaterial
	checked time.Time
}

func newTLSCreds(cfg TLSConfig, onReloadError func(error)) (*tlsCreds, error) {
	c := &tlsCreds{cfg: cfg, now: time.Now, onReloadError: onReloadError}
	m, err := c.load(nil)
	if err != nil {
		return nil, err
	}
	c.cur, c.checked = m, c.now()
	return c, nil
}

// load reads the files and parses them unless they equal prev's.
func (c *tlsCreds) load(prev *tlsMaterial) (*tlsMaterial, error) {
	var raw [3][]byte
	for i, f := range []string{c.cfg.CAFile, c.cfg.CertFile, c.cfg.KeyFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("cluster: reading TLS file: %w", err)
		}
		raw[i] = b
	}
	if prev != nil && bytes.Equal(raw[0], prev.raw[0]) && bytes.Equal(raw[1], prev.raw[1]) && bytes.Equal(raw[2], prev.raw[2]) {
		return prev, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw[0]) {
		return nil, fmt.Errorf("cluster: TLS CA file %s holds no PEM certificate", c.cfg.CAFile)
	}
	cert, err := tls.X509KeyPair(raw[1], raw[2])
	if err != nil {
		return nil, fmt.Errorf("cluster: TLS certificate %s and key %s: %w", c.cfg.CertFile, c.cfg.KeyFile, err)
	}
	return &tlsMaterial{cert: &cert, pool: pool, raw: raw}, nil
}

// current returns the material to use for a new connection, reading the
// files again if the last check is older than credsRecheck.
func (c *tlsCreds) current() *tlsMaterial {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if now.Sub(c.checked) < credsRecheck {
		return c.cur
	}
	c.checked = now
	m, err := c.load(c.cur)
	if err != nil {
		if c.onReloadError != nil {
			c.onReloadError(err)
		}
		return c.cur
	}
	c.cur = m
	return m
}

// notAfter is when this node's current certificate expires.
func (c *tlsCreds) notAfter() time.Time {
	m := c.current()
	if m.cert.Leaf == nil {
		return time.Time{}
	}
	return m.cert.Leaf.NotAfter
}

// serverConfig is the configuration of accepted connections: the peer must
// present a certificate that verifyPeer accepts.
func (c *tlsCreds) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: c.cfg.MinVersion,
		ClientAuth: tls.RequireAnyClientCert,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := c.current()
			return &tls.Config{
				MinVersion:   c.cfg.MinVersion,
				Certificates: []tls.Certificate{*m.cert},
				ClientAuth:   tls.RequireAnyClientCert,
				VerifyConnection: func(cs tls.ConnectionState) error {
					return verifyPeer(m.pool, cs, x509.ExtKeyUsageClientAuth, "")
				},
			}, nil
		},
	}
}

// clientConfig is the configuration of one dialled connection.
func (c *tlsCreds) clientConfig() *tls.Config {
	m := c.current()
	return &tls.Config{
		MinVersion: c.cfg.MinVersion,
		ServerName: c.cfg.ServerName,
		// Verification is done by VerifyConnection against the CA pool,
		// with the configured server name or none: peers are dialled by IP.
		InsecureSkipVerify: true,
		Certificates:       []tls.Certificate{*m.cert},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPeer(m.pool, cs, x509.ExtKeyUsageServerAuth, c.cfg.ServerName)
		},
	}
}

// verifyPeer checks that the peer's certificate chains to pool, is valid
// now, allows usage and, if name is set, names it.
func verifyPeer(pool *x509.CertPool, cs tls.ConnectionState, usage x509.ExtKeyUsage, name string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, ic := range cs.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots:         pool,
		Intermediates: inter,
		DNSName:       name,
		KeyUsages:     []x509.ExtKeyUsage{usage},
	})
	return err
}
