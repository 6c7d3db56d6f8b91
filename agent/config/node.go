package config

import (
	"fmt"
	"os"
)

// hostname is os.Hostname; tests replace it.
var hostname = os.Hostname

// ValidName says whether s may name a node or a lock group: it becomes part
// of etcd keys and of status lines, so no slashes, spaces or empty names.
func ValidName(s string) bool { return nameRe.MatchString(s) }

// Node is the node's name in the lock and in status: agent.node_name, or
// the host name when it is "auto". A host name that is not a valid name is
// an error naming agent.node_name, never a lock key with a slash in it.
func (a *Agent) Node() (string, error) {
	if a.NodeName != "" && a.NodeName != "auto" {
		return a.NodeName, nil
	}
	h, err := autoNodeName()
	if err != nil {
		return "", fmt.Errorf("agent.node_name: %w", err)
	}
	return h, nil
}

func autoNodeName() (string, error) {
	h, err := hostname()
	if err != nil {
		return "", fmt.Errorf("is \"auto\" and the host name is unknown: %w", err)
	}
	if !ValidName(h) {
		return "", fmt.Errorf("is \"auto\" and the host name %q does not match %s: set agent.node_name", h, nameRe)
	}
	return h, nil
}
