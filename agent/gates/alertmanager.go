package gates

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// maxAlertsBody bounds what is read from Alertmanager: a busy cluster's
// alert list is kilobytes, not megabytes.
const maxAlertsBody = 8 << 20

// Alertmanager reads alerts through Alertmanager's API v2.
type Alertmanager struct {
	URL    string // base URL, e.g. https://alertmanager.example:9093
	Client *http.Client
}

// AlertmanagerTLS are PEM files for a TLS Alertmanager: CAFile verifies the
// server, CertFile/KeyFile are a client certificate (both or neither).
type AlertmanagerTLS struct {
	CAFile, CertFile, KeyFile string
}

// NewAlertmanager builds the client; timeout bounds one request.
func NewAlertmanager(base string, files AlertmanagerTLS, timeout time.Duration) (*Alertmanager, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if files != (AlertmanagerTLS{}) {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if files.CAFile != "" {
			pem, err := os.ReadFile(files.CAFile)
			if err != nil {
				return nil, fmt.Errorf("reading Alertmanager CA file: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("Alertmanager CA file %s: no PEM certificate in it", files.CAFile)
			}
		}
		if files.CertFile != "" || files.KeyFile != "" {
			cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("loading Alertmanager client certificate: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		tr.TLSClientConfig = cfg
	}
	return &Alertmanager{URL: base, Client: &http.Client{Transport: tr, Timeout: timeout}}, nil
}

// apiAlert is the part of API v2's gettableAlert the gate reads.
type apiAlert struct {
	Labels map[string]string `json:"labels"`
	Status struct {
		State       string   `json:"state"`
		SilencedBy  []string `json:"silencedBy"`
		InhibitedBy []string `json:"inhibitedBy"`
	} `json:"status"`
}

// Alerts lists the active alerts. Silenced and inhibited ones are asked to
// be left out, and Evaluate leaves them out again, so an Alertmanager that
// ignores the filters gives the same answer.
func (a *Alertmanager) Alerts(ctx context.Context) ([]Alert, error) {
	u, err := url.Parse(strings.TrimRight(a.URL, "/") + "/api/v2/alerts")
	if err != nil {
		return nil, fmt.Errorf("alertmanager URL %q: %w", a.URL, err)
	}
	u.RawQuery = url.Values{"active": {"true"}, "silenced": {"false"}, "inhibited": {"false"}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := a.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading alerts: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAlertsBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading alerts from %s: %w", u.Redacted(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading alerts from %s: %s: %s", u.Redacted(), resp.Status, strings.TrimSpace(string(body[:min(len(body), 200)])))
	}
	if len(body) > maxAlertsBody {
		return nil, fmt.Errorf("reading alerts from %s: answer larger than %d bytes", u.Redacted(), maxAlertsBody)
	}
	var raw []apiAlert
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("decoding alerts from %s: %w", u.Redacted(), err)
	}
	out := make([]Alert, 0, len(raw))
	for _, r := range raw {
		out = append(out, Alert{Name: r.Labels["alertname"], State: r.Status.State, SilencedBy: r.Status.SilencedBy, InhibitedBy: r.Status.InhibitedBy})
	}
	return out, nil
}
