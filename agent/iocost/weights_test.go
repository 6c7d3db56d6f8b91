package iocost

import (
	"fmt"
	"testing"
)

func TestWindowWeights(t *testing.T) {
	const st, d, etcd = "update-agent-staging.service", "rpm-ostreed.service", "etcd.service"
	for _, tc := range []struct {
		name                     string
		iocost                   bool
		unit                     string
		policy, iocostW, etcdW   uint64
		etcdUnit                 string
		want                     string
		wantStager, wantEtcdAttr string
	}{
		{"the defaults under iocost", true, st, 10, 1, 10000, etcd,
			"IOWeight=1 on update-agent-staging.service and rpm-ostreed.service, IOWeight=10000 on etcd.service; every other cgroup keeps " + Others, "1", "10000"},
		{"etcd's unit unknown", true, st, 10, 1, 10000, "",
			"IOWeight=1 on update-agent-staging.service and rpm-ostreed.service, etcd's unit keeps its own; every other cgroup keeps " + Others, "1", "its own (left alone)"},
		{"etcd's weight off", true, st, 10, 1, 0, etcd,
			"IOWeight=1 on update-agent-staging.service and rpm-ostreed.service, etcd's unit keeps its own; every other cgroup keeps " + Others, "1", "its own (left alone)"},
		{"iocost weight unset: the policy's", true, st, 10, 0, 10000, etcd,
			"IOWeight=10 on update-agent-staging.service and rpm-ostreed.service, IOWeight=10000 on etcd.service; every other cgroup keeps " + Others, "10", "10000"},
		{"a foreign window", true, "", 10, 1, 10000, etcd,
			"IOWeight=1 on rpm-ostreed.service, IOWeight=10000 on etcd.service; every other cgroup keeps " + Others, "1", "10000"},
		{"no iocost: the policy alone", false, st, 10, 1, 10000, etcd,
			"IOWeight=10 on update-agent-staging.service and rpm-ostreed.service, etcd's unit keeps its own; every other cgroup keeps " + Others, "10", "its own (left alone)"},
		{"no weight at all", false, st, 0, 1, 10000, etcd,
			"update-agent-staging.service and rpm-ostreed.service keep their own IOWeight, etcd's unit keeps its own; every other cgroup keeps " + Others, "their own (left alone)", "its own (left alone)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := WindowWeights(tc.iocost, tc.unit, d, tc.policy, tc.iocostW, tc.etcdUnit, tc.etcdW)
			if got := w.String(); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
			a := map[string]string{}
			attrs := w.LogAttrs(tc.etcdUnit)
			for i := 0; i+1 < len(attrs); i += 2 {
				a[attrs[i].(string)] = fmt.Sprint(attrs[i+1])
			}
			if a["stager_io_weight"] != tc.wantStager || a["etcd_io_weight"] != tc.wantEtcdAttr || a["others"] != Others {
				t.Errorf("journal attributes %v", a)
			}
		})
	}
}

// "auto" leaves etcd's weight alone where the journal orders data and
// raises it elsewhere; a configured weight wins on both.
func TestEtcdWeight(t *testing.T) {
	for _, tc := range []struct {
		configured uint64
		ordersData bool
		want       uint64
	}{
		{0, true, 0},
		{0, false, EtcdRaisedWeight},
		{500, true, 500},
		{500, false, 500},
	} {
		if got, why := EtcdWeight(tc.configured, tc.ordersData); got != tc.want || why == "" {
			t.Errorf("EtcdWeight(%d, %v) = %d (%q), want %d", tc.configured, tc.ordersData, got, why, tc.want)
		}
	}
}
