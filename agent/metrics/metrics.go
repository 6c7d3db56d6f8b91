// Package metrics is the agent's Prometheus registry: its own, never the
// default one (importing etcd's server registers hundreds of metrics there).
// It implements engine.Metrics and takes the guard's decisions.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/update-agent/update-agent/agent/state"
)

const ns = "update_agent"

// Metrics holds the agent's collectors.
type Metrics struct {
	Registry *prometheus.Registry

	state          *prometheus.GaugeVec
	stagingSeconds *prometheus.HistogramVec
	frozenSeconds  prometheus.Counter
	guardDecisions *prometheus.CounterVec
	lockWait       prometheus.Histogram
	leaderMoves    prometheus.Counter
	failures       *prometheus.CounterVec
	fleetLock      *prometheus.CounterVec
	pacing         *prometheus.GaugeVec

	alerting alerting // alerting.go
}

// New returns the agent's metrics in a fresh registry.
func New(version string) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "state",
			Help: "1 for the engine's current state, 0 for the others.",
		}, []string{"state"}),
		stagingSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "staging_seconds",
			Help:    "Duration of staging attempts, by result.",
			Buckets: prometheus.ExponentialBuckets(30, 2, 10), // 30 s .. ~4 h
		}, []string{"result"}),
		frozenSeconds: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "staging_frozen_seconds_total",
			Help: "Time the latency guard kept staging frozen.",
		}),
		guardDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "guard_decisions_total",
			Help: "Latency guard decisions (freeze, thaw, forced_thaw, ...).",
		}, []string{"decision"}),
		lockWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "lock_wait_seconds",
			Help:    "Time spent waiting for a reboot slot.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10), // 1 s .. ~3 days
		}),
		leaderMoves: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "leader_moves_total",
			Help: "Times this agent moved etcd leadership away before rebooting.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "failures_total",
			Help: "Failed update steps, by step (stage, hooks, finalize, verify).",
		}, []string{"step"}),
		fleetLock: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "fleetlock_requests_total",
			Help: "FleetLock requests served, by endpoint and answer kind (ok or the error kind).",
		}, []string{"endpoint", "kind"}),
	}
	m.pacing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: ns, Name: "staging_pacing",
		Help: "1 for how the last staging window paced staging (mode: iocost, write_rate_loop, fixed_write_cap, no_write_cap; model: the iocost models' sources), 0 for the others seen.",
	}, []string{"mode", "models"})
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: ns, Name: "build_info", Help: "Always 1; the agent's version.",
	}, []string{"version"})
	info.WithLabelValues(version).Set(1)
	m.alerting = newAlerting()
	m.Registry.MustRegister(m.alerting.collectors()...)
	m.Registry.MustRegister(m.state, m.stagingSeconds, m.frozenSeconds, m.guardDecisions,
		m.lockWait, m.leaderMoves, m.failures, m.fleetLock, m.pacing, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, p := range state.Phases {
		m.state.WithLabelValues(string(p))
	}
	for _, s := range []string{"stage", "hooks", "finalize", "verify"} {
		m.failures.WithLabelValues(s)
	}
	return m
}

// SetPhase marks p as the current state.
func (m *Metrics) SetPhase(p state.Phase) {
	for _, q := range state.Phases {
		v := 0.0
		if q == p {
			v = 1
		}
		m.state.WithLabelValues(string(q)).Set(v)
	}
}

// StagingDone records one staging attempt.
func (m *Metrics) StagingDone(d time.Duration, err error) {
	r := "ok"
	if err != nil {
		r = "error"
	}
	m.stagingSeconds.WithLabelValues(r).Observe(d.Seconds())
}

// Paced records how the last staging window paced: summary is
// stage.Report's Pacing ("iocost (vda learned, vdb seed)", "write rate
// loop", ...), split into a mode and the models.
func (m *Metrics) Paced(summary string) {
	if summary == "" {
		return
	}
	mode, models := pacingLabels(summary)
	m.pacing.Reset()
	m.pacing.WithLabelValues(mode, models).Set(1)
}

// pacingLabels turns a pacing summary into the metric's labels.
func pacingLabels(summary string) (mode, models string) {
	if rest, ok := strings.CutPrefix(summary, "iocost ("); ok {
		return "iocost", strings.TrimSuffix(rest, ")")
	}
	switch {
	case strings.HasPrefix(summary, "write rate loop"):
		return "write_rate_loop", ""
	case strings.HasPrefix(summary, "no write cap"):
		return "no_write_cap", ""
	}
	return "fixed_write_cap", ""
}

// LockWaited records how long taking a slot took.
func (m *Metrics) LockWaited(d time.Duration) { m.lockWait.Observe(d.Seconds()) }

// LeaderMoved counts a leadership hand-off.
func (m *Metrics) LeaderMoved() { m.leaderMoves.Inc() }

// Failed counts a failed step.
func (m *Metrics) Failed(step string) { m.failures.WithLabelValues(step).Inc() }

// GuardDecisions counts n latency-guard decisions of one kind.
func (m *Metrics) GuardDecisions(decision string, n int) {
	m.guardDecisions.WithLabelValues(decision).Add(float64(n))
}

// Frozen adds time the guard kept staging frozen.
func (m *Metrics) Frozen(d time.Duration) { m.frozenSeconds.Add(d.Seconds()) }

// FleetLockRequest counts one FleetLock request (package fleetlock).
func (m *Metrics) FleetLockRequest(endpoint, kind string) {
	m.fleetLock.WithLabelValues(endpoint, kind).Inc()
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// Serve serves /metrics on ln until ctx ends.
func (m *Metrics) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
