package doctor

import (
	"context"
	"fmt"
	"strings"
)

func (d Doctor) reach(ctx context.Context) (string, error) {
	where, err := d.Etcd.Probe(ctx)
	if err != nil {
		return "", err
	}
	ms, err := d.Etcd.Members(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("reachable at %s, TLS and auth accepted; %d member(s)", where, len(ms)), nil
}

// rights fails when leader.move_leader needs an admin call that the
// user may not make: the rollout would fail at its last step, a leader's
// reboot.
func (d Doctor) rights(ctx context.Context) (string, error) {
	r, err := d.Etcd.Rights(ctx)
	if err != nil {
		return "", err
	}
	user := "user " + d.In.Username
	if d.In.Username == "" {
		user = "the client certificate's user"
	}
	switch {
	case !r.Auth:
		// Said here because it is what a worker's certificate is then worth.
		return "etcd authentication is off: no user or role needed, and any client etcd accepts (" +
			"this host, a certificate its client CA signed) reads and writes all of etcd; to confine workers to the lock prefix, see " +
			"\"etcd users and roles\" in operations.md", nil
	case r.Admin:
		return user + " has the root role: the lock prefix and MoveLeader allowed", nil
	case d.In.MoveLeader:
		return "", fmt.Errorf("%s lacks the root role: MoveLeader (leader.move_leader = true) is an admin call, refused right before a leader's reboot; "+
			"grant it the root role, or set leader.move_leader = false (a leader's reboot then costs an election)", user)
	}
	return user + " may use the lock prefix; no admin call needed (leader.move_leader = false)", nil
}

func (d Doctor) localMember(ctx context.Context) (string, error) {
	m, err := d.Etcd.LocalMatch(ctx)
	if err != nil {
		return "", err
	}
	return m.How, nil
}

func (d Doctor) leader(ctx context.Context) (string, error) {
	h, err := d.Etcd.Health(ctx)
	if err != nil {
		return "", err
	}
	l, ok := h.Leader()
	if !ok {
		return "", waiting{fmt.Errorf("no leader the reachable members agree on")}
	}
	return fmt.Sprintf("%s leads (term %d)", l.Name, l.RaftTerm), nil
}

func (d Doctor) health(ctx context.Context) (string, error) {
	h, err := d.Etcd.Health(ctx)
	if err != nil {
		return "", err
	}
	var probs []string
	var worst uint64
	voters := 0
	for _, m := range h.Members {
		if !m.Learner {
			voters++
		}
		if p := h.Problem(m, d.In.MaxLag); p != "" {
			probs = append(probs, p)
		} else if l := h.Lag(m); l > worst {
			worst = l
		}
	}
	if len(probs) > 0 {
		return "", waiting{fmt.Errorf("%d of %d member(s) unhealthy: %s", len(probs), len(h.Members), strings.Join(probs, "; "))}
	}
	return fmt.Sprintf("%d member(s) healthy (%d voting), raft lag at most %d (limit %d)", len(h.Members), voters, worst, d.In.MaxLag), nil
}

func (d Doctor) alarms(ctx context.Context) (string, error) {
	a, err := d.Etcd.Alarms(ctx)
	if err != nil {
		return "", err
	}
	if len(a) > 0 {
		return "", waiting{fmt.Errorf("active: %s", strings.Join(a, ", "))}
	}
	return "none active", nil
}
