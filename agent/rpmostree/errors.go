package rpmostree

import (
	"errors"

	"github.com/update-agent/update-agent/agent/oplog"
)

// Typed refusals of rpm-ostree, recognized from the CLI's stderr
// ("error: <message>"). The returned error wraps both the sentinel and the
// *oplog.Error, so errors.Is and errors.As both work and argv, exit code and
// stderr stay in the message.
var (
	// ErrNoStagedDeployment: finalize-deployment found nothing staged.
	ErrNoStagedDeployment = errors.New("no pending staged deployment")
	// ErrChecksumMismatch: the staged deployment is not the expected one.
	ErrChecksumMismatch = errors.New("staged deployment checksum mismatch")
	// ErrInhibited: a systemd shutdown inhibitor in block mode holds the reboot.
	ErrInhibited = errors.New("reboot blocked by a systemd inhibitor lock")
	// ErrAlreadyUnlocked: the staged deployment was not locked for
	// finalization (it would have been applied by any reboot).
	ErrAlreadyUnlocked = errors.New("staged deployment already unlocked")
	// ErrDriverRegistered: another update driver owns updates on this host.
	ErrDriverRegistered = errors.New("updates are driven by a registered update driver")
	// ErrBusy: another transaction is running.
	ErrBusy = errors.New("rpm-ostree transaction in progress")
	// ErrCancelled: the transaction was cancelled.
	ErrCancelled = errors.New("rpm-ostree transaction cancelled")
	// ErrRebooting: the daemon already initiated a reboot.
	ErrRebooting = errors.New("rpm-ostree reboot initiated")
)

// refusals maps stderr fragments, as upstream words them, to sentinels;
// where each is thrown in coreos/rpm-ostree is beside it. The stand-in's
// contract tests (contract_test.go) make it print each.
var refusals = []oplog.Refusal{
	// src/daemon/rpmostreed-transaction-types.cxx, finalize_deployment_transaction_execute
	{Fragment: "No pending staged deployment found", Err: ErrNoStagedDeployment},
	{Fragment: "Expected staged base checksum", Err: ErrChecksumMismatch},
	{Fragment: "Staged deployment already unlocked", Err: ErrAlreadyUnlocked},
	// src/daemon/rpmostreed-utils.cxx (the inhibitor check before a reboot)
	{Fragment: "Reboot blocked by a systemd inhibitor lock", Err: ErrInhibited},
	// src/app/rpmostree-clientlib.cxx (the registered update driver)
	{Fragment: "Updates and deployments are driven by", Err: ErrDriverRegistered},
	// src/daemon/rpmostreed-sysroot.cxx (a transaction running, a reboot started)
	{Fragment: "Transaction in progress", Err: ErrBusy},
	{Fragment: "Reboot initiated, cannot start new transaction", Err: ErrRebooting},
	// GLib's G_IO_ERROR_CANCELLED message (also rust/src/utils.rs)
	{Fragment: "Operation was cancelled", Err: ErrCancelled},
}

// classify adds the sentinel matching a failed command's stderr, if any.
func classify(err error) error {
	if s := oplog.Refused(err, refusals); s != nil {
		return Marked(s, err)
	}
	return err
}

// Marked returns err, which already says in words what sentinel means (the
// stderr in it), matching sentinel for errors.Is without repeating it.
func Marked(sentinel, err error) error { return oplog.Marked(sentinel, err) }
