package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// RunOptions shape one rollout.
type RunOptions struct {
	// Gen is the generation every host publishes; each rollout needs a
	// higher one than the last.
	Gen int
	// InitialLeader is made the leader before the rollout; -1 keeps the
	// current one.
	InitialLeader int
	// Timeout bounds the rollout (default 2 min).
	Timeout time.Duration
	// MemberDown: once a second node has rebooted, while it still holds
	// the slot, stop the member of the first (updated, not leading) for
	// this long: an outage in the middle of the rollout, while nodes are
	// still to reboot. None may reboot until it is back.
	MemberDown time.Duration
	// LateFollowers: the agents of all but the initial leader are told to
	// check (update-now) this long after the leader's: the leader's node
	// stages before any other has announced an update.
	LateFollowers time.Duration
	// Tick, when set, runs on every turn of the rollout's loop (about
	// every 20 ms), e.g. to crash agents (Fleet.Crash) while it goes on.
	Tick func()
}

// Rollout publishes an update on every host, has every agent check for it
// at once (update-now), and runs the fleet until every agent is idle on
// it, rebooting hosts as their agents finalize. It measures the leader
// changes (sampled), the elections and the time members were missing.
func (f *Fleet) Rollout(ro RunOptions) (Result, error) {
	if ro.Timeout == 0 {
		ro.Timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), ro.Timeout)
	defer cancel()
	if ro.InitialLeader >= 0 {
		if err := f.MoveLeaderTo(ctx, ro.InitialLeader); err != nil {
			return Result{}, err
		}
	}
	res := Result{InitialLeader: f.C.LeaderIndex()}
	if res.InitialLeader < 0 {
		return res, errors.New("no leader before the rollout")
	}
	targets := make([]string, len(f.Nodes))
	for i, n := range f.Nodes {
		targets[i] = n.Env.Publish(n.Env.Ref, ro.Gen)
	}
	term0, moves0, reboots0 := f.C.Term(), f.Moves(), len(f.Reboots())
	violations0 := len(f.Violations())

	var (
		mu      sync.Mutex
		samples []int
	)
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				l := f.C.LeaderIndex()
				mu.Lock()
				samples = append(samples, l)
				mu.Unlock()
			}
		}
	}()
	begin := time.Now()
	late := false
	for _, n := range f.Nodes {
		if ro.LateFollowers == 0 || n.I == res.InitialLeader {
			n.eng.UpdateNow()
		}
	}
	downMember, downUntil := -1, time.Time{}
	faulted := false
	if ro.MemberDown > 0 && len(f.Nodes) < 3 {
		return Result{}, errors.New("a member outage mid-rollout needs 3 members or more")
	}
	var err error
	for {
		if ro.LateFollowers > 0 && !late && time.Since(begin) >= ro.LateFollowers {
			late = true
			for _, n := range f.Nodes {
				if n.I != res.InitialLeader {
					n.eng.UpdateNow()
				}
			}
		}
		f.Step()
		if ro.Tick != nil {
			ro.Tick()
		}
		if rb := f.Reboots()[reboots0:]; ro.MemberDown > 0 && !faulted && len(rb) >= 2 {
			faulted = true
			downMember, downUntil = rb[0], time.Now().Add(ro.MemberDown)
			f.C.Stop(downMember)
		}
		if downMember >= 0 && time.Now().After(downUntil) {
			if err = f.C.Restart(downMember); err != nil {
				break
			}
			downMember = -1
		}
		if downMember < 0 && f.Done(targets) {
			break
		}
		if ctx.Err() != nil {
			var b strings.Builder
			for _, n := range f.Nodes {
				fmt.Fprintf(&b, "\n%s: %+v", n.Name, n.eng.Snapshot())
			}
			err = fmt.Errorf("rollout to generation %d did not finish in %v:%s", ro.Gen, ro.Timeout, b.String())
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.Total = time.Since(begin)
	close(stop)
	<-sampled
	if err != nil {
		return res, err
	}
	res.LeaderChanges = LeaderChanges(samples)
	res.Elections = f.C.Term() - term0
	res.Moves = f.Moves() - moves0
	f.mu.Lock()
	res.Order = append(res.Order, f.reboots[reboots0:]...)
	res.Missing = append(res.Missing, f.missing[reboots0:]...)
	res.Violations = append(res.Violations, f.violations[violations0:]...)
	f.mu.Unlock()
	for i, n := range f.Nodes {
		if b := f.Booted(n); b != targets[i] {
			return res, fmt.Errorf("%s booted %s, want %s", n.Name, b, targets[i])
		}
		if st := n.eng.Snapshot().State; len(st.Failures) > 0 {
			return res, fmt.Errorf("%s ended with failures: %+v", n.Name, st.Failures)
		}
	}
	if len(res.Order) != len(f.Nodes) {
		return res, fmt.Errorf("reboots %v, want each node once", res.Order)
	}
	return res, f.LockEmpty(ctx)
}

// MoveLeaderTo makes member i the leader (a random start for a rollout).
func (f *Fleet) MoveLeaderTo(ctx context.Context, i int) error {
	for ctx.Err() == nil {
		lead := f.C.LeaderIndex()
		if lead == i {
			return nil
		}
		if lead >= 0 {
			if err := f.moveLeader(ctx, lead, i); err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("could not make member %d the leader: %w", i, ctx.Err())
}

func (f *Fleet) moveLeader(ctx context.Context, from, to int) error {
	st, err := f.Admin.Status(ctx, f.C.Members[to].ClientURL)
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{f.C.Members[from].ClientURL},
		DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.MoveLeader(ctx, st.Header.MemberId)
	return err
}
