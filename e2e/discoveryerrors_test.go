package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// discoveryError is one entry of data.discoveryErrors in /api/v1/status/node.
type discoveryError struct {
	Kind   string    `json:"kind"`
	Method string    `json:"method"`
	Error  string    `json:"error"`
	Time   time.Time `json:"time"`
	Count  int       `json:"count"`
}

// discoveryErrors returns the agent's current discovery errors from the
// API, and its status page.
func (a *agent) discoveryErrors() ([]discoveryError, string, error) {
	var st struct {
		Data struct {
			DiscoveryErrors []discoveryError `json:"discoveryErrors"`
		} `json:"data"`
	}
	if err := a.getJSON("/api/v1/status/node", &st); err != nil {
		return nil, "", err
	}
	resp, err := httpClient.Get(a.url("/"))
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("%s /: %s", a.spec.name, resp.Status)
	}
	return st.Data.DiscoveryErrors, string(page), nil
}

// checkDiscoveryError requires an error of kind and method whose text has
// want, in the API answer and, HTML-escaped, in the status page's table.
func checkDiscoveryError(errs []discoveryError, page, kind, method, want string) error {
	found := false
	for _, e := range errs {
		if e.Kind == kind && e.Method == method {
			if !strings.Contains(e.Error, want) || e.Count < 1 || e.Time.IsZero() {
				return fmt.Errorf("API discovery error %+v lacks %q", e, want)
			}
			found = true
		}
	}
	if !found {
		return fmt.Errorf("no %s discovery error for %s in the API: %+v", kind, method, errs)
	}
	row := fmt.Sprintf(`data-kind="%s" data-method="%s"`, kind, method)
	i := strings.Index(page, row)
	if !strings.Contains(page, `<h2>Discovery errors</h2>`) || i < 0 {
		return fmt.Errorf("the status page has no %s row", row)
	}
	escaped := strings.ReplaceAll(want, `"`, "&#34;")
	if end := strings.Index(page[i:], "</tr>"); end < 0 || !strings.Contains(page[i:i+end], escaped) {
		return fmt.Errorf("the status page's %s row lacks %q", row, escaped)
	}
	return nil
}
