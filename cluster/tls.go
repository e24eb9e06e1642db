package cluster

import (
	"net"
	"strconv"

	"github.com/hashicorp/memberlist"
)

// Encryption names how gossip is protected, for the status page and API:
// "none", "key" (memberlist's shared AES key), "tls" or "tls+key".
func (n *Node) Encryption() string {
	switch {
	case n.tlsCreds != nil && len(n.cfg.SecretKey) > 0:
		return "tls+key"
	case n.tlsCreds != nil:
		return "tls"
	case len(n.cfg.SecretKey) > 0:
		return "key"
	}
	return "none"
}

// loadTLS reads the TLS files once, so that a bad file fails New.
func (n *Node) loadTLS() error {
	if !n.cfg.TLS.Enabled() {
		return nil
	}
	creds, err := newTLSCreds(n.cfg.TLS, func(err error) {
		n.logger.Error("gossip TLS files changed but do not load; keeping the previous certificate", "err", err)
	})
	if err != nil {
		return err
	}
	n.tlsCreds = creds
	return nil
}

// useTLS gives memberlist the TLS transport, bound to the listen address;
// memberlist then ignores its bind address and port.
func (n *Node) useTLS(c *memberlist.Config) error {
	if n.tlsCreds == nil {
		return nil
	}
	addr := net.JoinHostPort(n.listenIP.String(), strconv.Itoa(n.listenPort))
	t, err := newTLSTransport(addr, n.tlsCreds, c.TCPTimeout, n.logger.With("component", "gossip-tls"),
		func(reason string) { n.metrics.refused.WithLabelValues(reason).Inc() })
	if err != nil {
		return err
	}
	c.Transport = t
	return nil
}
