package cluster

import (
	"context"
	"log"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	refusedLabel      = "label"
	refusedEncryption = "encryption"
)

// refusalPatterns are fragments of memberlist v0.7.0 log lines that mean a
// packet or stream from another node was refused. memberlist has no hook for
// these, so the log line is the only signal.
var refusalPatterns = []struct{ fragment, reason string }{
	{"unacceptable label", refusedLabel},
	{"Decrypt packet failed", refusedEncryption},
	{"could decrypt the message", refusedEncryption},
	{"encryption is not configured", refusedEncryption},
	{"remote state is not encrypted", refusedEncryption},
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
		if strings.Contains(line, r.fragment) {
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
