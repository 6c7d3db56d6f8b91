package graph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// MaxResponse bounds the graph read: Fedora CoreOS's graph is ~100 KB; past
// this the answer is refused, not held or parsed.
const MaxResponse = 8 << 20

// Timeout bounds one request, connection to last byte.
const Timeout = time.Minute

// MaxRedirects bounds the redirects one fetch follows; a graph behind a
// load balancer or a moved base_url needs one or two, a loop needs a bound.
const MaxRedirects = 5

// Params identify the node to the server (the Cincinnati query).
type Params struct {
	Basearch, Stream, Platform, Group, NodeUUID string
	OSVersion                                   string
	// OSChecksum is the booted commit, or the booted image pinned by digest
	// (then OCI is set).
	OSChecksum string
	OCI        bool
	// Wariness is rollout_wariness, omitted when negative (the server
	// then decides).
	Wariness float64
}

// Query is the URL query for p, with zincati's keys.
func (p Params) Query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"basearch": p.Basearch, "stream": p.Stream, "platform": p.Platform,
		"group": p.Group, "node_uuid": p.NodeUUID, "os_version": p.OSVersion, "os_checksum": p.OSChecksum} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if p.OCI {
		q.Set("oci", "true")
	}
	if p.Wariness >= 0 {
		q.Set("rollout_wariness", fmt.Sprintf("%.6f", p.Wariness))
	}
	return q
}

// Client fetches graphs from one server.
type Client struct {
	// BaseURL is [cincinnati] base_url; the graph is at BaseURL/v1/graph.
	BaseURL string
	// HTTP defaults to a client with Timeout.
	HTTP *http.Client
}

// ServerError is the server's refusal ({"kind", "value"} with a 4xx/5xx).
type ServerError struct {
	Status      int
	Kind, Value string
}

func (e *ServerError) Error() string {
	if e.Kind == "" {
		return fmt.Sprintf("update graph server answered HTTP %d", e.Status)
	}
	return fmt.Sprintf("update graph server answered HTTP %d: %s: %s", e.Status, e.Kind, e.Value)
}

// ErrUnreachable wraps every failure to get an answer at all (connection,
// timeout, TLS): the node cannot tell whether an update exists.
var ErrUnreachable = errors.New("update graph unreachable")

// URLVariables are the ${name}s base_url may hold, filled from the query:
// zincati's Identity::url_variables (src/identity/mod.rs), substituted as
// its envsubst does (src/cincinnati/mod.rs): an unknown ${name} stays.
var URLVariables = []string{"basearch", "group", "platform", "stream"}

// Expand fills base_url's ${basearch}, ${group}, ${platform} and ${stream}
// from q. The stream may be the booted deployment's, so this is done per
// request, not once at start.
func Expand(base string, q url.Values) string {
	var pairs []string
	for _, k := range URLVariables {
		pairs = append(pairs, "${"+k+"}", q.Get(k))
	}
	return strings.NewReplacer(pairs...).Replace(base)
}

// Endpoint is the graph URL for q: base_url expanded, with v1/graph under
// its path and q added to its own query. Unlike zincati's Url::join
// (src/cincinnati/client.rs), a last path segment without a trailing slash
// is kept ("https://h/fcos" is "https://h/fcos/v1/graph", not
// "https://h/v1/graph"): a path written in base_url is meant.
func (c *Client) Endpoint(q url.Values) (string, error) {
	base := Expand(c.BaseURL, q)
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("cincinnati.base_url %q (%q expanded) is not an http(s) URL", c.BaseURL, base)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/graph"
	u.RawPath, u.Fragment = "", ""
	all := u.Query()
	for k, v := range q {
		all[k] = v // the node's own identity wins over base_url's
	}
	u.RawQuery = all.Encode()
	return u.String(), nil
}

// Fetch gets and decodes the graph for p.
func (c *Client) Fetch(ctx context.Context, p Params) (Graph, error) {
	endpoint, err := c.Endpoint(p.Query())
	if err != nil {
		return Graph{}, err
	}
	hc := &http.Client{Timeout: Timeout}
	if c.HTTP != nil {
		cp := *c.HTTP
		hc = &cp
	}
	// The redirect policy holds whatever client was given: a redirect from
	// https to http would hand the node's query and the graph it trusts
	// to anyone on the path.
	hc.CheckRedirect = checkRedirect(hc.CheckRedirect)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return Graph{}, fmt.Errorf("fetching the update graph: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return Graph{}, fmt.Errorf("%w: GET %s: %w", ErrUnreachable, endpoint, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponse+1))
	if err != nil {
		return Graph{}, fmt.Errorf("%w: reading the answer of GET %s: %w", ErrUnreachable, endpoint, err)
	}
	if len(body) > MaxResponse {
		return Graph{}, fmt.Errorf("GET %s: the answer exceeds %d bytes; refused", endpoint, MaxResponse)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		se := &ServerError{Status: resp.StatusCode}
		var e struct{ Kind, Value string }
		if json.Unmarshal(body, &e) == nil {
			se.Kind, se.Value = e.Kind, e.Value
		}
		return Graph{}, fmt.Errorf("GET %s: %w", endpoint, se)
	}
	g, err := Decode(body)
	if err != nil {
		return Graph{}, fmt.Errorf("GET %s: %w", endpoint, err)
	}
	return g, nil
}

// checkRedirect refuses a redirect that leaves https and bounds their
// number, then asks next (the caller's policy), if any.
func checkRedirect(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if len(via) > MaxRedirects {
			return fmt.Errorf("stopped after %d redirects", MaxRedirects)
		}
		if prev := via[len(via)-1]; prev.URL.Scheme == "https" && req.URL.Scheme != "https" {
			return fmt.Errorf("refusing the redirect from %s to %s: it leaves https", prev.URL.Redacted(), req.URL.Redacted())
		}
		if next != nil {
			return next(req, via)
		}
		return nil
	}
}
