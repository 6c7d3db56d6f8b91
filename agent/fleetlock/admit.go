package fleetlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/update-agent/update-agent/agent/etcdmember"
)

// memberCacheFor is how long a member list and its names' resolutions
// answer requests: every pre-reboot asks, and a stranger may ask often.
// A member added meanwhile is seen that much later.
const memberCacheFor = 5 * time.Second

// resolveTimeout bounds one name's lookup, as the agent's own check.
const resolveTimeout = 2 * time.Second

// memberCache is the last MemberView and when it was read.
type memberCache struct {
	mu   sync.Mutex
	at   time.Time
	view *MemberView
}

// admit refuses a pre-reboot from a client that the group's allow-list
// leaves out or that is (or may be) an etcd member, but for this host's own
// zincati when served (Options.LocalMember): member then names its member.
func (s *Server) admit(ctx context.Context, p Params, c Client) (member string, _ *Error) {
	if why := s.o.Allow[p.Group].Admits(p.ID, c.Addr); why != "" {
		s.log.Warn("FleetLock client refused: not allowed", "id", p.ID, "group", p.Group, "client", c.String(), "reason", why)
		return "", errorf(KindNotAllowed, "%s (group %s)", why, p.Group)
	}
	if member, e := s.localMember(ctx, p, c); member != "" || e != nil {
		return member, e
	}
	return "", s.notMember(ctx, p, c)
}

// notMember refuses a client that is (or may be) an etcd member.
func (s *Server) notMember(ctx context.Context, p Params, c Client) *Error {
	v, err := s.memberView(ctx)
	if err != nil {
		s.log.Error("FleetLock: reading etcd members", "id", p.ID, "group", p.Group, "err", err)
		return errorf(KindFailedLock, "%v", err)
	}
	m, err := v.MemberOf(p.ID, MemberAddr(c.Addr, s.o.Proxies))
	if err != nil {
		s.log.Error("FleetLock client refused: it may be an etcd member", "id", p.ID, "group", p.Group, "client", c.String(), "err", err)
		return errorf(KindFailedLock, "client %s: %v; refused until every member URL host name resolves", p.ID, err)
	}
	if m != "" {
		s.log.Warn("FleetLock client refused: it is an etcd member", "id", p.ID, "group", p.Group, "client", c.String(), "member", m)
		return errorf(KindEtcdMember, "client %s from %s is etcd member %s; a member reboots through update-agent "+
			"(member slot, quorum guard), not FleetLock", p.ID, c.Addr, m)
	}
	return nil
}

// memberView lists the members and resolves their URLs' host names, or
// returns the view read less than memberCacheFor ago. A failed read is not
// kept.
func (s *Server) memberView(ctx context.Context) (MemberView, error) {
	mc := &s.members
	mc.mu.Lock()
	defer mc.mu.Unlock() // one reader at a time: the others wait for its answer
	now := s.o.Clock.Now()
	if mc.view != nil && now.Sub(mc.at) < memberCacheFor && !now.Before(mc.at) {
		return *mc.view, nil
	}
	resp, err := s.sem.cli.MemberList(ctx)
	if err != nil {
		return MemberView{}, fmt.Errorf("listing etcd members: %w", err)
	}
	var v MemberView
	for _, m := range resp.Members {
		v.Members = append(v.Members, Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, Learner: m.IsLearner})
	}
	for _, name := range etcdmember.URLHostNames(v.Members) {
		v.Resolved = append(v.Resolved, etcdmember.Resolve(ctx, s.o.LookupHost, name, resolveTimeout))
	}
	mc.at, mc.view = now, &v
	return v, nil
}
