package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/util/compression"
)

// start runs the receiver on a free port and returns its printed URLs and
// a channel with runMain's result.
func start(t *testing.T, ctx context.Context, dir string) (map[string]string, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runMain(ctx, []string{"--web.listen-address=127.0.0.1:0", "--storage.path=" + dir, "--log.level=warn"}, pw, io.Discard)
		pw.Close()
	}()
	urls := map[string]string{}
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			t.Fatalf("unexpected start line %q", sc.Text())
		}
		urls[k] = v
		if k == "status" {
			break
		}
	}
	if urls["status"] == "" {
		t.Fatalf("receiver printed %v and stopped: %v", urls, <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	return urls, done
}

func TestRunWriteQueryShutdown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	urls, done := start(t, ctx, dir)
	for _, k := range []string{"listen", "write", "query"} {
		if !strings.HasPrefix(urls[k], "http://127.0.0.1:") {
			t.Errorf("%s URL = %q", k, urls[k])
		}
	}

	// A Remote-Write 1.0 request, as a sender without Prometheus' client would make it.
	now := time.Now().UnixMilli()
	wr := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:  prompb.FromLabels(labels.FromStrings("__name__", "up", "job", "demo"), nil),
		Samples: []prompb.Sample{{Timestamp: now, Value: 1}},
	}}}
	raw, err := wr.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	body, err := compression.Encode(compression.Snappy, raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, urls["write"], bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %s", resp.Status)
	}

	resp, err = http.Get(urls["listen"] + "/api/v1/query?" + url.Values{"query": {"up"}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	var qr struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  []any             `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&qr)
	resp.Body.Close()
	if err != nil || qr.Status != "success" || len(qr.Data.Result) != 1 || qr.Data.Result[0].Metric["job"] != "demo" || qr.Data.Result[0].Value[1] != "1" {
		t.Fatalf("query up: %+v (%v)", qr, err)
	}

	// A second receiver on the same storage is refused, not a corruption.
	if err := runMain(ctx, []string{"--web.listen-address=127.0.0.1:0", "--storage.path=" + dir}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("second receiver on the same storage: err = %v, want an error naming %s", err, dir)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("receiver did not stop after its context ended")
	}
	if _, err := os.Stat(filepath.Join(dir, "wal")); err != nil {
		t.Errorf("no WAL in the storage path: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "lock")); !os.IsNotExist(err) {
		t.Errorf("lock file left behind after a clean shutdown: %v", err)
	}
}

func TestBadFlagsAndAddress(t *testing.T) {
	ctx := context.Background()
	if err := runMain(ctx, []string{"--no-such-flag"}, io.Discard, io.Discard); err == nil {
		t.Error("unknown flag accepted")
	}
	err := runMain(ctx, []string{"--web.listen-address=127.0.0.1:notaport", "--storage.path=" + t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "notaport") {
		t.Errorf("bad listen address: err = %v, want an error naming it", err)
	}
}
