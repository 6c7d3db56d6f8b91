package config

import (
	"net/url"
	"regexp"
)

func (k *checker) gates(g *Gates) {
	k.positive("gates.timeout", g.Timeout)
	if g.AlertRegexp != "" {
		if _, err := regexp.Compile(g.AlertRegexp); err != nil {
			k.fail("gates.alert_regexp", "not a regular expression: %v", err)
		}
	}
	if g.AlertmanagerURL != "" {
		u, err := url.Parse(g.AlertmanagerURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			k.fail("gates.alertmanager_url", "must be an http:// or https:// URL, got %q", g.AlertmanagerURL)
		}
	} else if g.AlertRegexp != "" {
		k.warn("gates.alert_regexp", "ignored while gates.alertmanager_url is empty")
	}
	for _, f := range []struct{ key, path string }{
		{"gates.ca_file", g.CAFile}, {"gates.cert_file", g.CertFile}, {"gates.key_file", g.KeyFile},
	} {
		if f.path != "" {
			k.readable(f.key, f.path)
		}
	}
	if (g.CertFile == "") != (g.KeyFile == "") {
		k.failRel("gates.key_file", []string{"gates.cert_file"}, "gates.cert_file and gates.key_file must be given together")
	}
	k.commands("gates.commands", g.Commands)
}
