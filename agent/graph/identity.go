package graph

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
)

// appID is zincati's application ID: deriving node_uuid with it gives the
// node the same identity (and so the same rollout bucket) it had under
// zincati.
var appID = [16]byte{0xde, 0x35, 0x10, 0x6b, 0x6e, 0xc2, 0x46, 0x88, 0xb6, 0x3a, 0xfd, 0xda, 0xa1, 0x56, 0x67, 0x9b}

// NodeUUID is `systemd-id128 machine-id -a de35106b6ec24688b63afddaa156679b`
// (sd_id128_get_machine_app_specific) for the contents of /etc/machine-id,
// in zincati's format (32 lowercase hex digits).
func NodeUUID(machineID string) (string, error) {
	key, err := hex.DecodeString(strings.TrimSpace(machineID))
	if err != nil || len(key) != 16 {
		return "", fmt.Errorf("machine ID %q is not 32 hex digits", strings.TrimSpace(machineID))
	}
	m := hmac.New(sha256.New, key)
	m.Write(appID[:])
	id := m.Sum(nil)[:16]
	id[6] = id[6]&0x0f | 0x40 // a version 4 UUID, as systemd makes it
	id[8] = id[8]&0x3f | 0x80
	return hex.EncodeToString(id), nil
}

// Basearch is the architecture in Fedora's words.
func Basearch(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	}
	return goarch // ppc64le, s390x, riscv64 are spelt alike
}

// HostBasearch is Basearch of this build.
func HostBasearch() string { return Basearch(runtime.GOARCH) }

// Platform is ignition.platform.id from a kernel command line, as zincati
// reads it; "" when absent.
func Platform(cmdline string) string {
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, "ignition.platform.id="); ok && v != "" {
			return v
		}
	}
	return ""
}

// Stream reads the update stream of a deployment from its base commit's
// metadata (rpm-ostree status's base-commit-meta), where zincati looks: the
// image's com.coreos.stream label, the manifest's fedora-coreos.stream
// annotation, or the commit's own fedora-coreos.stream key.
func Stream(meta map[string]any) (string, bool) {
	if s, ok := meta["ostree.container.image-config"].(string); ok {
		var c struct {
			Config struct{ Labels map[string]string } `json:"config"`
		}
		if json.Unmarshal([]byte(s), &c) == nil && c.Config.Labels["com.coreos.stream"] != "" {
			return c.Config.Labels["com.coreos.stream"], true
		}
	}
	if s, ok := meta["ostree.manifest"].(string); ok {
		var m struct{ Annotations map[string]string }
		if json.Unmarshal([]byte(s), &m) == nil && m.Annotations["fedora-coreos.stream"] != "" {
			return m.Annotations["fedora-coreos.stream"], true
		}
	}
	if s, ok := meta["fedora-coreos.stream"].(string); ok && s != "" {
		return s, true
	}
	return "", false
}
