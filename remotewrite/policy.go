package remotewrite

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
)

// FailurePolicy is what a queue does with a 4xx answer other than 429 (the
// table is in docs/remote-write.md).
type FailurePolicy string

const (
	// PolicyDurable (the default) never drops a backlog for an answer that
	// is not the data's fault: 401 and 403 pause the queue until the
	// credentials files change or the next probe; 404 pauses it until the
	// next probe; 408 is retried with backoff; 413 splits a request once and
	// drops what still does not fit.
	PolicyDurable FailurePolicy = "durable"
	// PolicySpec is the Remote-Write specification's sender: no 4xx but 429
	// is retried; each drops the request, counted by reason.
	PolicySpec FailurePolicy = "spec"
)

// defaultProbeInterval is how long a paused queue waits before sending its
// request again when nothing changed on disk. A variable so that tests can
// shorten it.
var defaultProbeInterval = 5 * time.Minute

// credentialsPollInterval is how often a queue paused by authentication
// looks at its credentials files. A variable so that tests can shorten it.
var credentialsPollInterval = 5 * time.Second

// QueueOptions are shoal's own settings of one remote_write entry: the
// entry's `shoal:` block, which the Prometheus configuration has no field
// for (see ExtractOptions). The zero value is the default.
type QueueOptions struct {
	// FailurePolicy: "durable" (default, "" means it) or "spec".
	FailurePolicy FailurePolicy `yaml:"failure_policy,omitempty"`
	// ProbeInterval is how long a paused queue waits before trying again
	// without a credentials change; 0 means 5m.
	ProbeInterval model.Duration `yaml:"probe_interval,omitempty"`
}

// UnmarshalYAML refuses unknown policies and negative intervals.
func (o *QueueOptions) UnmarshalYAML(unmarshal func(any) error) error {
	type plain QueueOptions
	if err := unmarshal((*plain)(o)); err != nil {
		return err
	}
	return o.validate()
}

func (o QueueOptions) validate() error {
	switch o.FailurePolicy {
	case "", PolicyDurable, PolicySpec:
	default:
		return fmt.Errorf("failure_policy %q is not one of %q, %q", o.FailurePolicy, PolicyDurable, PolicySpec)
	}
	if o.ProbeInterval < 0 {
		return fmt.Errorf("probe_interval %v is negative", o.ProbeInterval)
	}
	return nil
}

// resolved fills in the defaults.
func (o QueueOptions) resolved() QueueOptions {
	if o.FailurePolicy == "" {
		o.FailurePolicy = PolicyDurable
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = model.Duration(defaultProbeInterval)
	}
	return o
}

// Reasons of shoal_remotewrite_samples_dropped_total under PolicySpec, and
// of shoal_remotewrite_queue_paused under PolicyDurable.
const (
	dropUnauthorized   = "unauthorized"    // 401
	dropForbidden      = "forbidden"       // 403
	dropNotFound       = "not_found"       // 404
	dropRequestTimeout = "request_timeout" // 408
	dropClientError    = "client_error"    // any other 4xx but 429

	pauseAuth     = "auth"      // 401, 403: until the credentials change or the next probe
	pauseNotFound = "not_found" // 404: until the next probe
)

// pauseReasons are the values of shoal_remotewrite_queue_paused's reason.
var pauseReasons = []string{pauseAuth, pauseNotFound}

// failureAction is what the failure policy does with one answer.
type failureAction uint8

const (
	actRetry failureAction = iota // again after a backoff
	actDrop                       // count as dropped and move on
	actSplit                      // send the halves (once); then as actDrop
	actPause                      // wait for new credentials or the probe, then again
)

// classifyFailure is the failure policy. status is 0 when no HTTP answer
// came (network, TLS, timeout). reason is the drop or pause reason, or the
// retry reason (the status).
func classifyFailure(status int, p FailurePolicy) (failureAction, string) {
	switch status {
	case http.StatusBadRequest:
		return actDrop, dropBadRequest
	case http.StatusConflict:
		return actDrop, dropConflict
	case http.StatusUnprocessableEntity:
		return actDrop, dropUnprocessable
	case 0:
		return actRetry, retryNoAnswerNetwork
	case http.StatusTooManyRequests:
		return actRetry, strconv.Itoa(status)
	}
	if p == PolicySpec {
		return classifySpec(status)
	}
	switch status {
	case http.StatusRequestEntityTooLarge:
		return actSplit, dropTooLarge
	case http.StatusUnauthorized, http.StatusForbidden:
		return actPause, pauseAuth
	case http.StatusNotFound:
		return actPause, pauseNotFound
	}
	// 5xx, 408, 3xx and any other answer: not the data's fault.
	return actRetry, strconv.Itoa(status)
}

// classifySpec: the specification's sender drops on every 4xx but 429.
func classifySpec(status int) (failureAction, string) {
	switch {
	case status == http.StatusRequestEntityTooLarge:
		return actDrop, dropTooLarge
	case status == http.StatusUnauthorized:
		return actDrop, dropUnauthorized
	case status == http.StatusForbidden:
		return actDrop, dropForbidden
	case status == http.StatusNotFound:
		return actDrop, dropNotFound
	case status == http.StatusRequestTimeout:
		return actDrop, dropRequestTimeout
	case status >= 400 && status < 500:
		return actDrop, dropClientError
	}
	return actRetry, strconv.Itoa(status)
}

// credentialFiles are the files of a remote_write entry whose change may
// cure a 401 or 403: the HTTP client's credentials, secrets and client
// certificates, and Google IAM's credentials. The HTTP client reads them
// again by itself; the queue only needs to know when to try again.
func credentialFiles(rw *config.RemoteWriteConfig) []string {
	hc := rw.HTTPClientConfig
	files := []string{hc.BearerTokenFile, hc.TLSConfig.CertFile, hc.TLSConfig.KeyFile, hc.TLSConfig.CAFile}
	if a := hc.Authorization; a != nil {
		files = append(files, a.CredentialsFile)
	}
	if b := hc.BasicAuth; b != nil {
		files = append(files, b.UsernameFile, b.PasswordFile)
	}
	if o := hc.OAuth2; o != nil {
		files = append(files, o.ClientSecretFile, o.ClientCertificateKeyFile, o.TLSConfig.CertFile, o.TLSConfig.KeyFile)
	}
	if g := rw.GoogleIAMConfig; g != nil {
		files = append(files, g.CredentialsFile)
	}
	out := files[:0]
	for _, f := range files {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// fingerprint is a digest of the files' contents (a missing or unreadable
// file counts as such), so that a Kubernetes Secret update, which swaps a
// symlink and keeps modification times, is seen too.
func fingerprint(files []string) [sha256.Size]byte {
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(h, "%s\x00unreadable\x00", f)
			continue
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// pauseState counts the shards paused for each reason; the queue is paused
// while any is.
type pauseState struct {
	mtx   sync.Mutex
	count map[string]int
}

func (p *pauseState) add(reason string, d int) (paused bool) {
	p.mtx.Lock()
	defer p.mtx.Unlock()
	if p.count == nil {
		p.count = map[string]int{}
	}
	p.count[reason] += d
	return p.count[reason] > 0
}

// pause holds a request the receiver refused for reason until the queue's
// credentials files change (reason auth), the probe interval passes, or
// ctx ends (false). The backlog stays in the WAL meanwhile: nothing is
// acknowledged and no request is sent.
func (q *queue) pause(ctx context.Context, reason string, status int, msg string) bool {
	files := credentialFiles(q.spec.rw)
	before := fingerprint(files)
	probe := time.Duration(q.opts.ProbeInterval)
	if q.pauses.add(reason, 1) {
		q.m.paused.WithLabelValues(reason).Set(1)
	}
	defer func() {
		if !q.pauses.add(reason, -1) {
			q.m.paused.WithLabelValues(reason).Set(0)
		}
	}()
	q.logger.Warn("Remote write refused a request; pausing the queue (the backlog stays in the WAL)",
		"status", status, "err", msg, "reason", reason, "next_probe", probe, "credentials_files", len(files))
	t := time.NewTimer(probe)
	defer t.Stop()
	var poll <-chan time.Time
	if reason == pauseAuth && len(files) > 0 {
		tick := time.NewTicker(credentialsPollInterval)
		defer tick.Stop()
		poll = tick.C
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			q.logger.Info("Probing a paused remote write", "reason", reason)
			return true
		case <-poll:
			if fingerprint(files) != before {
				q.logger.Info("Remote-write credentials changed; resending", "reason", reason)
				return true
			}
		}
	}
}
