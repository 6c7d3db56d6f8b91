package gates

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A fake Alertmanager serving API v2 answers: what it serves is the test's
// input; the filters it was asked for are checked too.
func fakeAlertmanager(t *testing.T, body string, status int) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v2/alerts" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		if q.Get("silenced") != "false" || q.Get("inhibited") != "false" || q.Get("active") != "true" {
			t.Errorf("query %q does not filter silenced and inhibited alerts", r.URL.RawQuery)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

const (
	firingJSON   = `[{"labels":{"alertname":"EtcdMembersDown","severity":"critical"},"status":{"state":"active","silencedBy":[],"inhibitedBy":[]}}]`
	silencedJSON = `[{"labels":{"alertname":"EtcdMembersDown"},"status":{"state":"suppressed","silencedBy":["a1b2"],"inhibitedBy":[]}}]`
)

func TestAlertmanagerGate(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		status int
		re     string
		hold   bool
		why    string
	}{
		{name: "firing", body: firingJSON, status: 200, hold: true, why: "firing: EtcdMembersDown"},
		{name: "firing, not matching", body: firingJSON, status: 200, re: "^Node", hold: false},
		{name: "silenced", body: silencedJSON, status: 200, hold: false},
		{name: "absent", body: `[]`, status: 200, hold: false},
		{name: "server error", body: `boom`, status: 500, hold: true, why: "cannot read alerts"},
		{name: "not JSON", body: `<html>`, status: 200, hold: true, why: "decoding alerts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakeAlertmanager(t, tt.body, tt.status)
			am, err := NewAlertmanager(srv.URL, AlertmanagerTLS{}, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			alerts, err := am.Alerts(context.Background())
			in := Inputs{AlertsEnabled: true, Alerts: alerts, AlertsErr: err}
			if tt.re != "" {
				in.AlertRegexp = regexp.MustCompile(tt.re)
			}
			hold, why := Holding(Evaluate(in))
			if hold != tt.hold || !strings.Contains(why, tt.why) {
				t.Fatalf("hold %v %q, want %v containing %q", hold, why, tt.hold, tt.why)
			}
		})
	}
}

func TestAlertmanagerUnreachableHolds(t *testing.T) {
	srv := fakeAlertmanager(t, `[]`, 200)
	url := srv.URL
	srv.Close()
	am, err := NewAlertmanager(url, AlertmanagerTLS{}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	alerts, err := am.Alerts(context.Background())
	hold, why := Holding(Evaluate(Inputs{AlertsEnabled: true, Alerts: alerts, AlertsErr: err}))
	if !hold || !strings.Contains(why, "cannot read alerts") {
		t.Fatalf("an unreachable Alertmanager must hold: %v %q", hold, why)
	}
}
