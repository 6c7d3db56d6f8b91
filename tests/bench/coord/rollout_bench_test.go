//go:build bench

package coord

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/update-agent/update-agent/tests/etcdtest"
	"github.com/update-agent/update-agent/tests/rollout"
	"github.com/update-agent/update-agent/tests/rpmostree/standintest"
)

var bin standintest.Binaries

func TestMain(m *testing.M) { standintest.Main(m, &bin) }

// benchMode is one way of rolling an update through a fleet.
type benchMode struct {
	name       string
	aware      bool
	memberDown time.Duration
	rollouts   int
}

// TestRollingUpdates rolls updates through fleets of 3 and 5 hosts
// (BENCH_ROLLOUT_MEMBERS), each host the production engine with the real
// adapters over the rpm-ostree stand-in and a member of a real embedded etcd
// (tests/rollout), every rollout from a random initial leader. Modes
// (BENCH_ROLLOUT_MODES): leader-aware (the defaults), unaware (no leader
// rules: etcd hands leadership over as the leader stops) and member-down
// (leader-aware while an updated member is down for 15 s mid-rollout).
// BENCH_ROLLOUTS rollouts per mode (default 50; member-down
// BENCH_MEMBER_DOWN_ROLLOUTS, default 10), the modes interleaved rollout by
// rollout. Fails if a leader-aware rollout changes the leader more than
// once, has an election no agent planned, or any rollout reboots a node
// while another member is down.
func TestRollingUpdates(t *testing.T) {
	n, nDown, sizes, want := 50, 10, "3,5", "leader-aware,unaware,member-down"
	switch {
	case smoke:
		n, sizes, want = 2, "3", "leader-aware,unaware"
	case quick:
		n, nDown = 5, 2
	}
	n = envInt("BENCH_ROLLOUTS", n)
	nDown = envInt("BENCH_MEMBER_DOWN_ROLLOUTS", nDown)
	members := envList("BENCH_ROLLOUT_MEMBERS", sizes)
	modeNames := envList("BENCH_ROLLOUT_MODES", want)
	var modes []benchMode
	for _, m := range []benchMode{
		{name: "leader-aware", aware: true, rollouts: n},
		{name: "unaware", rollouts: n},
		{name: "member-down", aware: true, memberDown: 15 * time.Second, rollouts: nDown},
	} {
		if contains(modeNames, m.name) {
			modes = append(modes, m)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var sums []rollout.Summary
	var csv strings.Builder
	csv.WriteString("members,mode,rollout,initial_leader,leader_changes,elections,planned_moves,order,missing_s,total_s,violations\n")
	began := time.Now()
	for _, size := range members {
		members, err := strconv.Atoi(size)
		if err != nil {
			t.Fatalf("BENCH_ROLLOUT_MEMBERS: %v", err)
		}
		fleets := make([]*rollout.Fleet, len(modes))
		results := make([][]rollout.Result, len(modes))
		for i, m := range modes {
			p, lp := rollout.Unaware()
			if m.aware {
				p, lp = rollout.LeaderAware()
			}
			fleets[i] = rollout.New(t, rollout.Options{Bin: bin, Etcd: etcdtest.Options{Members: members}, Policy: p, Leader: lp})
		}
		for k := 0; ; k++ {
			ran := false
			for i, m := range modes {
				if k >= m.rollouts {
					continue
				}
				ran = true
				initial := rng.IntN(members)
				r, err := fleets[i].Rollout(rollout.RunOptions{Gen: k + 1, InitialLeader: initial, MemberDown: m.memberDown,
					Timeout: 2*time.Minute + m.memberDown})
				if err != nil {
					t.Fatalf("%d members, %s, rollout %d: %v", members, m.name, k, err)
				}
				results[i] = append(results[i], r)
				var miss []string
				for _, d := range r.Missing {
					miss = append(miss, fmt.Sprintf("%.3f", d.Seconds()))
				}
				fmt.Fprintf(&csv, "%d,%s,%d,%d,%d,%d,%d,%s,%s,%.3f,%d\n", members, m.name, k, r.InitialLeader, r.LeaderChanges,
					r.Elections, r.Moves, strings.Trim(fmt.Sprint(r.Order), "[]"), strings.Join(miss, " "), r.Total.Seconds(), len(r.Violations))
				for _, v := range r.Violations {
					t.Errorf("%d members, %s, rollout %d: %s", members, m.name, k, v)
				}
				if m.aware && (r.LeaderChanges > 1 || r.Unplanned() != 0) {
					t.Errorf("%d members, %s, rollout %d: %d leader changes, %d elections for %d planned moves",
						members, m.name, k, r.LeaderChanges, r.Elections, r.Moves)
				}
			}
			if !ran {
				break
			}
		}
		for i, m := range modes {
			sums = append(sums, rollout.Summarize(m.name, members, results[i]))
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	writeResult(t, "rollouts.csv", csv.String())
	writeResult(t, "rollouts.md", fmt.Sprintf(`## Rolling updates through the engine

Each host runs the agent's engine (engine.New with the production adapters: agent/lock,
agent/etcdmember, the state store, the rpm-ostree stand-in doing real ostree I/O); each host's
member belongs to one embedded etcd (loopback, heartbeat 100 ms, election 1000 ms: etcd's
defaults). A rollout: every host publishes a new update and checks at once (update-now); it ends
when every agent is idle on it and the lock is empty. A reboot stops the agent and the member,
applies the staged deployment and starts both again in a new boot. Intervals: recheck 200 ms
(the daemon: 30 s), reboot lease 20 s. Each rollout starts from a random initial leader; the modes
take turns rollout by rollout. member-down: once the second node has rebooted, the first one's
member is stopped for 15 s. %s, %.0f s in all, load average at the end: %s.

%s`, time.Now().UTC().Format("2006-01-02 15:04 UTC"), time.Since(began).Seconds(), strings.TrimSpace(string(load)), rollout.Table(sums)))
}

func envList(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}
