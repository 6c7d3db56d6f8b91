package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// alerting are the gauges an operator alerts on: a stalled node, failing
// checks, a target set aside, a gate that keeps holding. Timestamps are
// Unix seconds, so a rule compares them with time().
type alerting struct {
	lastCheck   prometheus.Gauge
	stateChange prometheus.Gauge
	setAside    prometheus.Gauge
	gateHolding *prometheus.GaugeVec
}

func newAlerting() alerting {
	return alerting{
		lastCheck: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "last_check_success_timestamp_seconds",
			Help: "When the last check for updates succeeded (update or none found); 0 before the first.",
		}),
		stateChange: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "state_change_timestamp_seconds",
			Help: "When the engine entered its current state (persisted across restarts).",
		}),
		setAside: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "targets_set_aside",
			Help: "Update targets set aside after repeated failures, or pulled from the update graph (retried on a newer target or update-now).",
		}),
		gateHolding: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "gate_holding",
			Help: "Per reboot gate at its last evaluation: 1 holding the reboot, 0 open.",
		}, []string{"gate"}),
	}
}

func (a alerting) collectors() []prometheus.Collector {
	return []prometheus.Collector{a.lastCheck, a.stateChange, a.setAside, a.gateHolding}
}

// CheckSucceeded records a successful check for updates (engine.AlertMetrics).
func (m *Metrics) CheckSucceeded(at time.Time) {
	m.alerting.lastCheck.Set(float64(at.UnixNano()) / 1e9)
}

// StateRecorded records when the current state was entered and how many
// targets are set aside (engine.AlertMetrics).
func (m *Metrics) StateRecorded(since time.Time, setAside int) {
	if !since.IsZero() {
		m.alerting.stateChange.Set(float64(since.UnixNano()) / 1e9)
	}
	m.alerting.setAside.Set(float64(setAside))
}

// GatesHolding records one evaluation of the reboot gates: per gate, whether
// it holds (several commands share the gate "command": any holding holds).
func (m *Metrics) GatesHolding(holding map[string]bool) {
	for gate, h := range holding {
		v := 0.0
		if h {
			v = 1
		}
		m.alerting.gateHolding.WithLabelValues(gate).Set(v)
	}
}
