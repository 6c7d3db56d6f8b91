package doctor

import (
	"encoding/json"
	"fmt"
	"io"
)

// Result is one check's line.
type Result struct {
	Check  string
	OK     bool
	Detail string
	// Wait: not OK, but the agent is set up right and the cluster holds
	// reboots now (an alarm, an unhealthy member, a gate): WAIT, not FAIL.
	Wait bool
	// Skip: not run, because what it asks did not answer (etcd): that
	// one line FAILs with the cause, and these are SKIP, not more FAILs
	// an operator would chase.
	Skip bool
	// Warn: it works now, but something will break it or mislead
	// (WARN, not a failure).
	Warn bool
}

func (r Result) String() string {
	return fmt.Sprintf("%-4s  %-14s %s", r.Verdict(), r.Check, r.Detail)
}

// Report is every check's result, in order.
type Report []Result

// Failed counts the failed checks (WAIT, SKIP and WARN lines are not
// failures).
func (r Report) Failed() int {
	n := 0
	for _, x := range r {
		if !x.OK && !x.Wait && !x.Skip && !x.Warn {
			n++
		}
	}
	return n
}

// Waiting counts the checks that found the cluster holding reboots now.
func (r Report) Waiting() int {
	n := 0
	for _, x := range r {
		if x.Wait {
			n++
		}
	}
	return n
}

// waiting marks a check's error as a temporary state of the cluster.
type waiting struct{ error }

func (w waiting) Unwrap() error { return w.error }

// warning marks a check's error as WARN: it works now, but misleads or
// will break (see Result.Warn).
type warning struct{ error }

func (w warning) Unwrap() error { return w.error }

// Verdict is the result column: "ok", "FAIL", "WAIT", "SKIP" or "WARN".
func (r Result) Verdict() string {
	switch {
	case r.Warn:
		return "WARN"
	case r.Wait:
		return "WAIT"
	case r.Skip:
		return "SKIP"
	case !r.OK:
		return "FAIL"
	}
	return "ok"
}

// WriteJSON prints the checks as a JSON array, one object per check with
// the columns of Write: check, result (ok, FAIL, WAIT, SKIP or WARN) and detail.
func (r Report) WriteJSON(w io.Writer) error {
	type line struct {
		Check  string `json:"check"`
		Result string `json:"result"`
		Detail string `json:"detail"`
	}
	out := make([]line, 0, len(r))
	for _, x := range r {
		out = append(out, line{x.Check, x.Verdict(), x.Detail})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// Write prints one line per check.
func (r Report) Write(w io.Writer) error {
	for _, x := range r {
		if _, err := fmt.Fprintln(w, x); err != nil {
			return err
		}
	}
	return nil
}
