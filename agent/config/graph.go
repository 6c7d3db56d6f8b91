package config

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// SourceGraph follows the OS update graph (Cincinnati, as zincati does):
// barriers, phased rollouts and dead ends are honoured, and the chosen
// release is deployed by checksum or image digest.
const SourceGraph = "graph"

// Cincinnati is the update graph server, in zincati's words.
type Cincinnati struct {
	// BaseURL: the graph is GET <base_url>/v1/graph, ${stream},
	// ${basearch}, ${platform} and ${group} filled in. Required while
	// updates.source is "graph".
	BaseURL string `toml:"base_url"`
}

// Identity is how the node presents itself to the graph server; the first
// three keys are zincati's and mean the same.
type Identity struct {
	// Group is the update group sent to the graph server (not lock.group).
	Group string `toml:"group"`
	// NodeUUID: "" derives zincati's (from /etc/machine-id), so the node
	// keeps its place in rollouts.
	NodeUUID        string   `toml:"node_uuid"`
	RolloutWariness Wariness `toml:"rollout_wariness"`
	// Stream, Basearch and Platform: "" reads them from the host as zincati
	// does (the booted commit's metadata, the build, ignition.platform.id).
	Stream   string `toml:"stream"`
	Basearch string `toml:"basearch"`
	Platform string `toml:"platform"`
}

// Wariness is rollout_wariness: 0.0 (bold) to 1.0 (cautious), or "auto":
// not sent, the server decides from node_uuid.
type Wariness float64

// WarinessAuto is "auto".
const WarinessAuto Wariness = -1

func (w *Wariness) UnmarshalTOML(v any) error {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case int64:
		f = float64(x)
	case string:
		if x == "auto" {
			*w = WarinessAuto
			return nil
		}
		return fmt.Errorf("must be a number from 0.0 to 1.0 or \"auto\", got %q", x)
	default:
		return fmt.Errorf("must be a number from 0.0 to 1.0 or \"auto\", got %s", tomlTypeName(v))
	}
	if f < 0 || f > 1 {
		return fmt.Errorf("must be a number from 0.0 to 1.0 or \"auto\", got %v", f)
	}
	*w = Wariness(f)
	return nil
}

func (w Wariness) String() string {
	if w < 0 {
		return "auto"
	}
	return strconv.FormatFloat(float64(w), 'f', -1, 64)
}

// zincati's group label rule.
var groupRe = regexp.MustCompile(`^[a-zA-Z0-9.-]+$`)

func (k *checker) graph(c *Cincinnati, id *Identity, source string) {
	on := source == SourceGraph
	// ${stream} and the rest are filled per check (graph.Expand): check
	// the URL they make, with values as a stream name would be.
	expanded := strings.NewReplacer("${basearch}", "x", "${group}", "x", "${platform}", "x", "${stream}", "x").Replace(c.BaseURL)
	switch u, err := url.Parse(expanded); {
	case c.BaseURL == "" && on:
		k.failRel("cincinnati.base_url", []string{"updates.source"}, "required when updates.source is \"graph\"")
	case c.BaseURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == ""):
		k.fail("cincinnati.base_url", "must be an http(s) URL, got %q", c.BaseURL)
	case c.BaseURL != "" && !on:
		k.warn("cincinnati.base_url", "ignored while updates.source is not \"graph\"")
	}
	if u, err := url.Parse(c.BaseURL); err == nil && strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/v1/graph") {
		// zincati's base_url and ours both stop before it.
		k.warn("cincinnati.base_url", "ends in /v1/graph, which the agent appends: the graph would be read from %s/v1/graph; give the server's base URL",
			strings.TrimRight(c.BaseURL, "/"))
	}
	if !on && id.Group != "default" {
		// A zincati fragment's group: zincati takes its FleetLock group
		// from it, the agent does not.
		k.warn("identity.group", "the update graph's group, ignored while updates.source is not \"graph\"; the reboot slots' group is lock.group")
	}
	if !groupRe.MatchString(id.Group) {
		k.fail("identity.group", "must match %s, got %q", groupRe, id.Group)
	}
	if id.NodeUUID != "" {
		if h := strings.ReplaceAll(id.NodeUUID, "-", ""); len(h) != 32 || strings.Trim(strings.ToLower(h), "0123456789abcdef") != "" {
			k.fail("identity.node_uuid", "must be 32 hex digits (sd-id128), got %q", id.NodeUUID)
		}
	}
	for _, f := range []struct{ key, v string }{{"identity.stream", id.Stream}, {"identity.basearch", id.Basearch}, {"identity.platform", id.Platform}} {
		if f.v != "" && !groupRe.MatchString(f.v) {
			k.fail(f.key, "must match %s or be \"\" (read from the host), got %q", groupRe, f.v)
		}
	}
}
