package fleetlock

import (
	"net/netip"
	"strings"

	"github.com/update-agent/update-agent/agent/etcdmember"
)

// A host that runs an etcd member and keeps zincati (the agent stages and
// reboots nothing itself) points zincati at its own agent's server. Such a
// client is a member and is refused like any other, unless the server was
// told this host's zincati id (Options.LocalMember): then a request from
// loopback with that id is this host's zincati, and it reboots the way the
// agent would have rebooted the member: group slot, then the cluster-wide
// member slot, the leader rule, the quorum check, leadership moved away
// before the 200, and the slots released after boot only once the member
// is healthy again.

// LocalClient says whether a request for id from c is this host's own
// zincati (nodeID: its FleetLock id, see graph.NodeUUID), and if not, why.
// Only loopback proves the request comes from this host; a listed proxy
// forwards other hosts' requests, so a request from it never is. The id
// alone would not do: any worker can send it.
func LocalClient(nodeID, id string, c Client, proxies []netip.Addr) (bool, string) {
	ip, err := netip.ParseAddr(c.Addr)
	switch {
	case nodeID == "":
		return false, "this host's zincati id is not known"
	case !strings.EqualFold(id, nodeID):
		return false, "the id is not this host's zincati id"
	case err != nil || !ip.Unmap().IsLoopback():
		return false, "the request does not come over loopback"
	case MemberAddr(c.Addr, proxies) == "":
		return false, "the request comes from a proxy (fleetlock.proxies)"
	}
	return true, ""
}

// MemberAnswer is the answer to the local member's zincati for a decision
// of the ordering rules (etcdmember.MayAcquire, MayReboot): nil for
// Proceed. MoveLeadership is not an answer: the server moves it and asks
// again; should it come here, zincati waits.
func MemberAnswer(member string, d etcdmember.Decision) *Error {
	switch d.Verdict {
	case etcdmember.Proceed:
		return nil
	case etcdmember.Refuse:
		return errorf(KindMemberUnsafe, "etcd member %s may not reboot: %s", member, d.Reason)
	}
	return errorf(KindMemberUnsafe, "etcd member %s may not reboot yet: %s; slots kept while you keep asking", member, d.Reason)
}

// SteadyAnswer is the answer to the local member's steady-state: its slots
// are released only once the member is healthy again (the engine's
// post-boot check), problem being Health.Problem of the member ("" when
// healthy) and listed whether the health report names it.
func SteadyAnswer(member string, listed bool, problem string) *Error {
	switch {
	case !listed:
		return errorf(KindMemberUnsafe, "etcd member %s is not in the cluster's health report; slots kept until it is back and healthy", member)
	case problem != "":
		return errorf(KindMemberUnsafe, "%s; slots kept until etcd member %s is healthy again", problem, member)
	}
	return nil
}
