package fleetlock

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/update-agent/update-agent/agent/etcdmember"
)

// Member is an etcd member as the member check sees it.
type Member = etcdmember.Member

// MemberView is what the member check knows: the members, and what the
// host names of their URLs (etcdmember.URLHostNames) resolved to on this
// host, the same lookup the agent's own local-member check makes.
type MemberView struct {
	Members  []Member
	Resolved []etcdmember.Resolution
}

// MemberOf names the etcd member that a client id from addr is ("" when
// none): its id is a member's name or URL host, or its address is a
// member's URL address or one of the addresses behind a member URL's host
// name (every one, IPv4 and IPv6). Such a client would reboot a member
// outside the member slot and the quorum guard, which only agents take.
// A member URL host name that did not resolve (or was not looked up) is an
// error unless another member matched: the client may be behind it, so it
// is refused, never admitted.
func (v MemberView) MemberOf(id, addr string) (string, error) {
	ip, ipErr := netip.ParseAddr(addr)
	if ipErr == nil {
		ip = ip.Unmap().WithZone("")
	}
	var unresolved []string
	for _, m := range v.Members {
		if m.Name != "" && strings.EqualFold(id, m.Name) {
			return m.Name, nil
		}
		for _, raw := range append(append([]string(nil), m.PeerURLs...), m.ClientURLs...) {
			u, err := url.Parse(raw)
			if err != nil || u.Hostname() == "" {
				continue
			}
			host := strings.TrimSuffix(u.Hostname(), ".")
			if strings.EqualFold(id, host) {
				return memberName(m, raw), nil
			}
			if ipErr != nil {
				continue
			}
			if h, err := netip.ParseAddr(host); err == nil {
				if h = h.Unmap().WithZone(""); !h.IsUnspecified() && h == ip {
					return memberName(m, raw), nil
				}
				continue
			}
			if strings.EqualFold(host, "localhost") {
				if ip.IsLoopback() {
					return memberName(m, raw), nil
				}
				continue
			}
			res, ok := v.resolution(host)
			switch {
			case !ok:
				unresolved = append(unresolved, host+" (not looked up)")
			case res.Err != nil:
				unresolved = append(unresolved, res.Err.Error()) // names the name
			default:
				for _, a := range res.Addrs {
					if a = a.Unmap().WithZone(""); !a.IsUnspecified() && a == ip {
						return memberName(m, raw), nil
					}
				}
			}
		}
	}
	if len(unresolved) > 0 {
		return "", fmt.Errorf("cannot tell whether %s is an etcd member: member URL host name(s) did not resolve: %s",
			addr, strings.Join(dedup(unresolved), ", "))
	}
	return "", nil
}

// MemberAddr is the client address the member check compares: none for a
// request from a listed proxy (fleetlock.proxies), which may run on a
// member host and forwards workers; its clients are checked by id only.
func MemberAddr(addr string, proxies []netip.Addr) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	ip = ip.Unmap().WithZone("")
	for _, p := range proxies {
		if p.Unmap().WithZone("") == ip {
			return ""
		}
	}
	return addr
}

func (v MemberView) resolution(name string) (etcdmember.Resolution, bool) {
	name = strings.ToLower(name)
	for _, r := range v.Resolved {
		if r.Name == name {
			return r, true
		}
	}
	return etcdmember.Resolution{}, false
}

func memberName(m Member, url string) string {
	if m.Name != "" {
		return m.Name
	}
	return url
}

func dedup(s []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
