package metrics

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v2"

	"github.com/update-agent/update-agent/agent/state"
)

func TestAlertingGauges(t *testing.T) {
	m := New("1.2.3")
	if v := value(t, m, "update_agent_last_check_success_timestamp_seconds", ""); v != 0 {
		t.Errorf("last check before any = %v", v)
	}
	at := time.Unix(1_700_000_000, 500_000_000)
	m.CheckSucceeded(at)
	if v := value(t, m, "update_agent_last_check_success_timestamp_seconds", ""); v != 1_700_000_000.5 {
		t.Errorf("last check = %v", v)
	}
	m.StateRecorded(at.Add(time.Minute), 2)
	if v := value(t, m, "update_agent_state_change_timestamp_seconds", ""); v != 1_700_000_060.5 {
		t.Errorf("state change = %v", v)
	}
	if v := value(t, m, "update_agent_targets_set_aside", ""); v != 2 {
		t.Errorf("set aside = %v", v)
	}
	// A record never saved (zero Since) keeps the last known time.
	m.StateRecorded(time.Time{}, 0)
	if v := value(t, m, "update_agent_state_change_timestamp_seconds", ""); v != 1_700_000_060.5 {
		t.Errorf("state change after a zero Since = %v", v)
	}
	if v := value(t, m, "update_agent_targets_set_aside", ""); v != 0 {
		t.Errorf("set aside = %v after the record cleared", v)
	}
	m.GatesHolding(map[string]bool{"etcd-alarms": true, "command": false})
	m.GatesHolding(map[string]bool{"etcd-alarms": false})
	if v := value(t, m, "update_agent_gate_holding", "etcd-alarms"); v != 0 {
		t.Errorf("etcd-alarms = %v after it opened", v)
	}
	if v := value(t, m, "update_agent_gate_holding", "command"); v != 0 {
		t.Errorf("command = %v", v)
	}
}

const rulesFile = "../../packaging/examples/metrics/update-agent-alerts.yml"

// The example alert rules parse as Prometheus rule groups, and every metric
// and state they name exists: a renamed metric would silence an alert.
func TestAlertRulesNameRealMetrics(t *testing.T) {
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.UnmarshalStrict(data, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	m := New("1.2.3")
	m.GatesHolding(map[string]bool{"command": true}) // a vector shows once it has a series
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	var phases []string
	for _, p := range state.Phases {
		phases = append(phases, string(p))
	}
	metric := regexp.MustCompile(`\bupdate_agent_[a-z_]+\b`)
	etcdMetric := regexp.MustCompile(`\betcd_[a-z_]+\b`)
	etcdHave := etcdMetrics(t)
	stateSel := regexp.MustCompile(`state=~?"([^"]*)"`)
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %q: alert, expr and a summary are required", r.Alert)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("rule %s: for: %v", r.Alert, err)
				}
			}
			names := metric.FindAllString(r.Expr, -1)
			if len(names) == 0 {
				t.Errorf("rule %s names no update_agent metric", r.Alert)
			}
			for _, name := range names {
				if !have[name] {
					t.Errorf("rule %s: no metric %s in the agent's registry", r.Alert, name)
				}
			}
			for _, name := range etcdMetric.FindAllString(r.Expr, -1) {
				if !etcdHave[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] {
					t.Errorf("rule %s: etcd exports no metric %s", r.Alert, name)
				}
			}
			for _, sel := range stateSel.FindAllStringSubmatch(r.Expr, -1) {
				for _, p := range strings.Split(sel[1], "|") {
					if !slices.Contains(phases, p) {
						t.Errorf("rule %s: no state %q (states: %v)", r.Alert, p, phases)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s: no rules", rulesFile)
	}
}

// With promtool on PATH (Debian's prometheus package), the rules' PromQL
// is checked and each alert fires on a scenario (testdata/alerts_test.yml).
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("UA_REQUIRE_TOOLS") != "" {
			t.Fatal("promtool not found on PATH; tests/host-deps.sh fetches it (make test sets PATH)")
		}
		t.Skip("promtool not installed")
	}
	argv := []string{promtool, "test", "rules", "testdata/alerts_test.yml"}
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Errorf("%v: %v\n%s", argv, err, out)
	}
}
