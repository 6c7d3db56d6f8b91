package agent

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/containerd/cgroups/v3/cgroup2"
	_ "github.com/coreos/go-systemd/v22/daemon"
	_ "github.com/coreos/go-systemd/v22/dbus"
	_ "github.com/coreos/go-systemd/v22/journal"
	_ "github.com/godbus/dbus/v5"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/common/expfmt"
	_ "go.etcd.io/etcd/client/v3"
	_ "go.etcd.io/etcd/client/v3/concurrency"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "golang.org/x/sys/unix"
)
