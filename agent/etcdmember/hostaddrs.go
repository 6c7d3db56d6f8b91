package etcdmember

import (
	"fmt"
	"net"
	"net/netip"
)

// OwnAddrs lists the addresses of this host's interfaces (of the network
// namespace the process runs in), with the interface of each.
func OwnAddrs() ([]HostAddr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing network interfaces: %w", err)
	}
	var out []HostAddr
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("listing the addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			out = append(out, HostAddr{IP: ip.Unmap(), Iface: ifc.Name})
		}
	}
	return out, nil
}
