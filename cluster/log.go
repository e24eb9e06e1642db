package cluster

import (
	"context"
	"log"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of shoal_cluster_refused_messages_total.
const (
	refusedLabel      = "label"      // cluster name (memberlist label) mismatch
	refusedEncryption = "encryption" // wrong key, or plaintext where a key is set (or the reverse)
	refusedMalformed  = "malformed"  // bytes that do not decode: garbage, truncation, bad checksum
	refusedOversized  = "oversized"  // a size field over memberlist's limits
	refusedOverload   = "overload"   // memberlist's queues were full; the message was dropped
	refusedTimeout    = "timeout"    // an incoming stream (or TLS handshake) not complete within the TCP timeout (slow or stalled sender)
	refusedTLS        = "tls"        // a failed TLS handshake: certificate from another CA, expired, missing, or no TLS at all
)

var refusalReasons = []string{refusedLabel, refusedEncryption, refusedMalformed, refusedOversized, refusedOverload, refusedTimeout, refusedTLS}

// refusalPatterns are fragments of memberlist v0.7.0 log lines that mean a
// packet or stream from another node was refused. memberlist has no hook for
// these, so the log line is the only signal. A fragment "a|b" needs both;
// the first match wins, so that "failed to receive: no installed keys could
// decrypt the message" is an encryption refusal, not a malformed message.
// Not counted, because memberlist does not log it: a stream that ends before
// its announced length (io.EOF).
var refusalPatterns = []struct{ fragment, reason string }{
	{"failed to receive|i/o timeout", refusedTimeout}, // the deadline memberlist sets on accepted streams
	{"unacceptable label", refusedLabel},
	{"Decrypt packet failed", refusedEncryption},
	{"could decrypt the message", refusedEncryption},
	{"encryption is not configured", refusedEncryption},
	{"remote state is not encrypted", refusedEncryption},
	{"larger than limit", refusedOversized},
	{"exceeds limit", refusedOversized},
	{"handler queue full", refusedOverload},
	{"Too many pending push/pull", refusedOverload},
	{"failed to receive", refusedMalformed}, // stream label header, read errors and timeouts, decode errors
	{"Failed to receive user message", refusedMalformed},
	{"cannot decode label", refusedMalformed},
	{"label header cannot be empty", refusedMalformed},
	{"unexpected double", refusedMalformed},
	{"Failed to decode", refusedMalformed},
	{"Failed to decompress", refusedMalformed},
	{"Failed to read remote state", refusedMalformed},
	{"missing message type byte", refusedMalformed},
	{"not supported", refusedMalformed},
	{"invalid msgType", refusedMalformed},
	{"invalid checksum", refusedMalformed},
	{"truncated messages", refusedMalformed},
}

// logWriter turns memberlist's "[LEVEL] memberlist: message" lines into slog
// records and counts refused messages.
type logWriter struct {
	logger  *slog.Logger
	refused *prometheus.CounterVec
}

func newMemberlistLogger(logger *slog.Logger, refused *prometheus.CounterVec) *log.Logger {
	return log.New(&logWriter{logger: logger, refused: refused}, "", 0)
}

func (w *logWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, l := range []struct {
		prefix string
		level  slog.Level
	}{
		{"[DEBUG]", slog.LevelDebug},
		{"[INFO]", slog.LevelInfo},
		{"[WARN]", slog.LevelWarn},
		{"[ERR]", slog.LevelError},
		{"[ERROR]", slog.LevelError},
	} {
		if strings.HasPrefix(line, l.prefix) {
			level = l.level
			line = strings.TrimSpace(strings.TrimPrefix(line, l.prefix))
			break
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	for _, r := range refusalPatterns {
		if containsAll(line, r.fragment) {
			w.refused.WithLabelValues(r.reason).Inc()
			// A refusal is about another cluster or a misconfigured peer, not
			// a fault of this node.
			level = slog.LevelWarn
			break
		}
	}
	w.logger.Log(context.Background(), level, line, "component", "memberlist")
	return len(p), nil
}

// containsAll reports whether line contains every "|"-separated part of fragments.
func containsAll(line, fragments string) bool {
	for f := range strings.SplitSeq(fragments, "|") {
		if !strings.Contains(line, f) {
			return false
		}
	}
	return true
}
