package fleetlock

import (
	"crypto/x509"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// Client is who sent a request, as recorded in the queue entry it made:
// zincati sends no client certificate, so the peer address is what binds
// an entry to its client; a verified certificate's names bind it more
// tightly when there is one.
type Client struct {
	// Addr is the peer's IP address, without the port: a client opens a
	// new connection per request, and a rebooted node comes back from the
	// same address.
	Addr string `json:"addr,omitempty"`
	// Cert names the verified client certificate (subject CN and SANs),
	// "" without one.
	Cert string `json:"cert,omitempty"`
}

func (c Client) String() string {
	if c.Cert != "" {
		return c.Addr + " (" + c.Cert + ")"
	}
	return c.Addr
}

// ClientOf is the client of request r. Forwarding headers are ignored: any
// sender could set them.
func ClientOf(r *http.Request) Client {
	var c Client
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		c.Addr = ap.Addr().Unmap().String()
	} else if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		c.Addr = host
	} else {
		c.Addr = r.RemoteAddr
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		c.Cert = certName(r.TLS.VerifiedChains[0][0])
	}
	return c
}

// certName is a certificate's identity: its subject CN and SANs, so a
// renewed certificate for the same names is the same client.
func certName(cert *x509.Certificate) string {
	var sans []string
	sans = append(sans, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		sans = append(sans, ip.String())
	}
	for _, u := range cert.URIs {
		sans = append(sans, u.String())
	}
	sans = append(sans, cert.EmailAddresses...)
	slices.Sort(sans)
	s := "CN=" + cert.Subject.CommonName
	if len(sans) > 0 {
		s += " SAN=" + strings.Join(sans, ",")
	}
	return s
}

// Owns says whether req may act on an entry that owner made (owner is nil
// for an entry written before owners were recorded: anyone may, as
// before). With a certificate recorded, only that certificate's names
// count (the address may change); otherwise the address must match.
func Owns(owner *Client, req Client) bool {
	switch {
	case owner == nil:
		return true
	case owner.Cert != "":
		return req.Cert == owner.Cert
	}
	return owner.Addr != "" && req.Addr == owner.Addr
}

// Allow is a group's allow-list; an empty list admits everyone.
type Allow struct {
	IDs      []string
	Networks []netip.Prefix
}

// Admits says why a client id from addr is not allowed ("" when it is):
// each list that is set must admit the request.
func (a Allow) Admits(id, addr string) string {
	if len(a.IDs) > 0 && !slices.Contains(a.IDs, id) {
		return "client id " + id + " is not in fleetlock.allow_ids"
	}
	if len(a.Networks) == 0 {
		return ""
	}
	ip, err := netip.ParseAddr(addr)
	if err == nil {
		ip = ip.Unmap()
		for _, n := range a.Networks {
			if n.Contains(ip) {
				return ""
			}
		}
	}
	return "address " + addr + " is not in fleetlock.allow_networks"
}
