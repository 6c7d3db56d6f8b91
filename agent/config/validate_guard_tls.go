package config

import "strings"

// guardTLS checks the TLS files of guard.metrics_url as etcd's are checked:
// readable, PEM, a matching pair, and only with an https:// URL.
func (k *checker) guardTLS(g *Guard) {
	ok := map[string]bool{}
	for _, f := range []struct{ key, path string }{
		{"guard.metrics_ca_file", g.MetricsCAFile}, {"guard.metrics_cert_file", g.MetricsCertFile}, {"guard.metrics_key_file", g.MetricsKeyFile},
	} {
		if f.path == "" {
			continue
		}
		ok[f.key] = k.readable(f.key, f.path)
		if !strings.HasPrefix(g.MetricsURL, "https://") {
			k.failRel(f.key, []string{"guard.metrics_url"}, "set, but guard.metrics_url is not an https:// URL")
		}
	}
	k.pemFiles(ok, tlsKey{"guard.metrics_ca_file", g.MetricsCAFile}, tlsKey{"guard.metrics_cert_file", g.MetricsCertFile}, tlsKey{"guard.metrics_key_file", g.MetricsKeyFile})
	if (g.MetricsCertFile == "") != (g.MetricsKeyFile == "") {
		k.failRel("guard.metrics_key_file", []string{"guard.metrics_cert_file"}, "guard.metrics_cert_file and guard.metrics_key_file must be set together")
	}
}
