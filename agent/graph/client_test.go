package graph_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/graph"
	gt "github.com/update-agent/update-agent/agent/graph/graphtest"
)

func params() graph.Params {
	return graph.Params{Basearch: "x86_64", Stream: "stable", Platform: "metal", Group: "etcd",
		NodeUUID: "975228d46dc94622b9bbe16671e2b58d", OSVersion: "40.1", OSChecksum: sum('a'), Wariness: 0.25}
}

func TestFetchQuery(t *testing.T) {
	s := gt.New(rel("40.1", 'a'), rel("40.2", 'b'))
	defer s.Close()
	g, err := (&graph.Client{BaseURL: s.URL + "/"}).Fetch(context.Background(), params())
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Nodes) != 2 || len(g.Edges) != 1 {
		t.Fatalf("graph %+v", g)
	}
	q := s.Queries()[0]
	for k, v := range map[string]string{"basearch": "x86_64", "stream": "stable", "platform": "metal", "group": "etcd",
		"node_uuid": "975228d46dc94622b9bbe16671e2b58d", "os_version": "40.1", "os_checksum": sum('a'), "rollout_wariness": "0.250000"} {
		if q.Get(k) != v {
			t.Errorf("query %s = %q, want %q", k, q.Get(k), v)
		}
	}
	if q.Has("oci") {
		t.Error("oci sent for a checksum payload")
	}
	p := params()
	p.Wariness = -1
	if q := p.Query(); q.Has("rollout_wariness") {
		t.Error("rollout_wariness sent while unset")
	}
}

// TestEndpoint: base_url's ${stream} and the rest are filled as zincati's
// envsubst does, its path kept whether or not it ends in a slash, its query
// kept beside the node's.
func TestEndpoint(t *testing.T) {
	q := params().Query()
	for _, tc := range []struct{ base, want string }{
		{"https://u.example", "https://u.example/v1/graph"},
		{"https://u.example/", "https://u.example/v1/graph"},
		{"https://u.example/fcos", "https://u.example/fcos/v1/graph"},
		{"https://u.example/fcos/", "https://u.example/fcos/v1/graph"},
		{"https://u.example/${stream}/${basearch}/${group}-${platform}/${other}", "https://u.example/stable/x86_64/etcd-metal/$%7Bother%7D/v1/graph"},
		{"https://u.example/fcos?key=k", "https://u.example/fcos/v1/graph"},
	} {
		got, err := (&graph.Client{BaseURL: tc.base}).Endpoint(q)
		if err != nil {
			t.Errorf("%s: %v", tc.base, err)
			continue
		}
		path, query, _ := strings.Cut(got, "?")
		if path != tc.want {
			t.Errorf("%s: %s, want %s", tc.base, path, tc.want)
		}
		if !strings.Contains(query, "stream=stable") || strings.Contains(tc.base, "key=k") && !strings.Contains(query, "key=k") {
			t.Errorf("%s: query %s lost the node's or base_url's", tc.base, query)
		}
	}
}

func TestFetchFailures(t *testing.T) {
	huge := bytes.Repeat([]byte(" "), graph.MaxResponse+1)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Write([]byte(`{"nodes":[`))
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close() // a dropped connection, mid-answer
	}))
	defer drop.Close()
	for _, tc := range []struct {
		name        string
		url         string
		raw         []byte
		unreachable bool
		err         string
	}{
		{name: "unreachable", url: closed.URL, unreachable: true, err: "connection refused"},
		{name: "dropped", url: drop.URL, unreachable: true, err: "reading the answer"},
		{name: "huge", raw: huge, err: "exceeds"},
		{name: "malformed", raw: []byte(`{"nodes": [}`), err: "decoding the update graph"},
		{name: "bad edge", raw: []byte(`{"nodes":[],"edges":[[0,1,2]]}`), err: "has 3 indexes"},
		{name: "not a URL", url: "ftp://x", err: "not an http(s) URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url
			if url == "" {
				s := gt.New()
				defer s.Close()
				s.Raw = tc.raw
				url = s.URL
			}
			_, err := (&graph.Client{BaseURL: url}).Fetch(context.Background(), params())
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			if errors.Is(err, graph.ErrUnreachable) != tc.unreachable {
				t.Errorf("unreachable = %v, want %v (%v)", !tc.unreachable, tc.unreachable, err)
			}
		})
	}
}

func TestFetchServerError(t *testing.T) {
	s := gt.New()
	defer s.Close()
	p := params()
	p.Stream = ""
	_, err := (&graph.Client{BaseURL: s.URL}).Fetch(context.Background(), p)
	var se *graph.ServerError
	if !errors.As(err, &se) || se.Status != 400 || se.Kind != "invalid_params" || !strings.Contains(err.Error(), "missing basearch or stream") {
		t.Fatalf("err = %v", err)
	}
}

// A redirect that leaves https is refused, whatever client was given; one
// within https is followed, a loop is cut.
func TestFetchRedirects(t *testing.T) {
	plain := gt.New(rel("40.1", 'a'), rel("40.2", 'b'))
	defer plain.Close()
	var tls *httptest.Server
	tls = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/down/v1/graph":
			http.Redirect(w, r, plain.URL+"/v1/graph?"+r.URL.RawQuery, http.StatusFound)
		case "/loop/v1/graph":
			http.Redirect(w, r, tls.URL+"/loop/v1/graph", http.StatusFound)
		case "/moved/v1/graph":
			http.Redirect(w, r, tls.URL+"/v1/graph", http.StatusMovedPermanently)
		default:
			w.Write([]byte(`{"nodes":[],"edges":[]}`))
		}
	}))
	defer tls.Close()
	for _, tc := range []struct{ path, err string }{
		{"/down", "leaves https"},
		{"/loop", "stopped after 5 redirects"},
		{"/moved", ""},
	} {
		t.Run(tc.path, func(t *testing.T) {
			_, err := (&graph.Client{BaseURL: tls.URL + tc.path, HTTP: tls.Client()}).Fetch(context.Background(), params())
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
	if n := len(plain.Queries()); n != 0 {
		t.Errorf("the plain-http server was queried %d times", n)
	}
}
