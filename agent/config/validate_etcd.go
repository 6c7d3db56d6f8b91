package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func (k *checker) etcd(e *Etcd) {
	if len(e.Endpoints) == 0 && k.c.Lock.Enabled {
		k.failRel("etcd.endpoints", []string{"lock.enabled"}, "at least one endpoint is needed while lock.enabled is true")
	}
	schemes := map[string]bool{}
	for i, ep := range e.Endpoints {
		if err := checkURL(ep, true); err != nil {
			k.fail(fmt.Sprintf("etcd.endpoints[%d]", i), "%v", err)
			continue
		}
		u, _ := url.Parse(ep)
		schemes[u.Scheme] = true
	}
	if schemes["http"] && schemes["https"] {
		k.fail("etcd.endpoints", "mixes http and https endpoints; the client uses one TLS setting for all")
	}
	ok := map[string]bool{}
	for _, f := range []struct{ key, path string }{
		{"etcd.ca_file", e.CAFile}, {"etcd.cert_file", e.CertFile}, {"etcd.key_file", e.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		ok[f.key] = k.readable(f.key, f.path)
		if len(schemes) > 0 && !schemes["https"] {
			k.failRel(f.key, []string{"etcd.endpoints"}, "set, but no endpoint uses https")
		}
	}
	if (e.CertFile == "") != (e.KeyFile == "") {
		k.failRel("etcd.key_file", []string{"etcd.cert_file"}, "etcd.cert_file and etcd.key_file must be set together")
	}
	k.tlsFiles(e, ok)
	if (e.Username == "") != (e.PasswordFile == "") {
		k.failRel("etcd.password_file", []string{"etcd.username"}, "etcd.username and etcd.password_file must be set together")
	}
	if e.PasswordFile != "" {
		k.passwordFile(e.PasswordFile)
		if schemes["http"] {
			k.failRel("etcd.password_file", []string{"etcd.endpoints"}, "a password is never sent over plain http: use https:// endpoints")
		}
	}
	k.positive("etcd.dial_timeout", e.DialTimeout)
	if strings.TrimSpace(e.Member) == "" {
		k.fail("etcd.member", "must be \"auto\" or the local member's name, got \"\"")
	}
	if e.LocalUnit != "" && !unitRe.MatchString(e.LocalUnit) {
		k.fail("etcd.local_unit", "must be \"\" or a service unit name like \"etcd.service\", got %q", e.LocalUnit)
	}
	switch {
	case e.LocalProcess == "":
	case e.LocalUnit != "":
		k.failRel("etcd.local_process", []string{"etcd.local_unit"}, "set with etcd.local_unit: name the member's unit or, where no unit runs it, its process, not both")
	case !processRe.MatchString(e.LocalProcess):
		k.fail("etcd.local_process", "must be \"\" or a process name as /proc/PID/comm shows it (1-15 characters, no \"/\"), like \"etcd\", got %q", e.LocalProcess)
	}
	if e.AllowQuorumLoss && !k.c.Leader.RequireQuorum {
		k.failRel("etcd.allow_quorum_loss", []string{"leader.require_quorum"},
			"has no effect while leader.require_quorum is false (nothing is checked); set one of them")
	}
}

// CheckDaemon checks what only the daemon needs (it reboots the host);
// stage-once and the FleetLock server read the same files without these
// rules. check-config reports them too. The errors name file and key.
func (c *Config) CheckDaemon() error {
	k := &checker{c: c, root: "/"}
	k.memberNeedsLock(&c.Etcd)
	return errors.Join(k.errs...)
}

// memberNeedsLock refuses lock.enabled = false where the configuration says
// this host runs an etcd member: without the lock there is no slot, no
// quorum check and no leader move, and the member would reboot as soon as
// its update is staged, with other members down or not. (With etcd.member
// = "auto" and no etcd.local_unit or local_process the configuration cannot
// tell: the daemon, check-config and doctor ask the host, LockOffRefused.)
func (k *checker) memberNeedsLock(e *Etcd) {
	if k.c.Lock.Enabled {
		return
	}
	const why = "must be true on a host that runs an etcd member (%s = %q): without the lock it would reboot with no slot, quorum check or leader move"
	switch {
	case e.LocalUnit != "":
		k.failRel("lock.enabled", []string{"etcd.local_unit"}, why, "etcd.local_unit", e.LocalUnit)
	case e.LocalProcess != "":
		k.failRel("lock.enabled", []string{"etcd.local_process"}, why, "etcd.local_process", e.LocalProcess)
	case e.Member != "auto" && strings.TrimSpace(e.Member) != "":
		k.failRel("lock.enabled", []string{"etcd.member"}, why, "etcd.member", e.Member)
	}
}

// LockOffRefused is the error, naming lock.enabled and the file that set
// it, for lock.enabled = false on a host found to run an etcd member (or
// not known not to): the configuration could not tell (etcd.member =
// "auto"), the host did. why says what was found.
func (c *Config) LockOffRefused(why string) error {
	return &FieldError{File: c.src.File("lock.enabled"), Key: "lock.enabled",
		Msg: "false is refused: " + why + "; without the lock this host would reboot with no slot, quorum check or leader move: " +
			"set lock.enabled = true (with etcd.endpoints) on a member's host"}
}

// MaxFollowersGrace bounds leader.followers_grace: longer would hold the
// leader's update back for days when a member never gets it.
const MaxFollowersGrace = 24 * time.Hour

func (k *checker) leader(l *Leader) {
	const key = "leader.followers_grace"
	switch d := l.FollowersGrace; {
	case d < 0:
		k.fail(key, "must be >= 0, got %q", d.String())
	case d.D() > MaxFollowersGrace:
		k.fail(key, "must be <= %s (the leader's node waits this long for members that may never get the update), got %q",
			Duration(MaxFollowersGrace), d.String())
	}
}

// tlsFiles parses the etcd TLS files that could be read.
func (k *checker) tlsFiles(e *Etcd, readable map[string]bool) {
	k.pemFiles(readable, tlsKey{"etcd.ca_file", e.CAFile}, tlsKey{"etcd.cert_file", e.CertFile}, tlsKey{"etcd.key_file", e.KeyFile})
}

// tlsKey is a TLS file's configuration key and path.
type tlsKey struct{ key, path string }

// pemFiles parses TLS files that could be read (readable by key), so that
// a CA file with no certificate or a key that does not match its
// certificate is reported here, with its key, rather than when the daemon
// starts.
func (k *checker) pemFiles(readable map[string]bool, ca, cert, key tlsKey) {
	if readable[ca.key] {
		pem, err := os.ReadFile(filepath.Join(k.root, ca.path))
		if err == nil && !x509.NewCertPool().AppendCertsFromPEM(pem) {
			k.fail(ca.key, "no PEM certificate in %q", ca.path)
		}
	}
	if readable[cert.key] && readable[key.key] {
		if _, err := tls.LoadX509KeyPair(filepath.Join(k.root, cert.path), filepath.Join(k.root, key.path)); err != nil {
			k.failRel(key.key, []string{cert.key}, "%q and %s %q are not a matching PEM key pair: %v", key.path, cert.key, cert.path, err)
		}
	}
}

// passwordFile refuses a password file that group or others may open, as
// ssh refuses such a private key: the password would not be secret.
func (k *checker) passwordFile(p string) {
	if !k.readable("etcd.password_file", p) {
		return
	}
	st, err := os.Stat(filepath.Join(k.root, p))
	if err != nil {
		k.fail("etcd.password_file", "cannot stat %q: %v", p, err)
		return
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		k.fail("etcd.password_file", "%q is open to group or others (mode %04o): make it 0600 or 0400", p, m)
	}
}
