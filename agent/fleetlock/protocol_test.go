package fleetlock

import (
	"net/http"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	served := func(g string) bool { return g == "default" || g == "workers" }
	body := func(id, group string) string {
		return `{"client_params":{"id":"` + id + `","group":"` + group + `"}}`
	}
	for _, tc := range []struct {
		name, method, header, body string
		want                       Kind // "" = accepted
	}{
		{"ok", "POST", "true", body("c988d2509fdf5cdcbed39037c56406fb", "workers"), ""},
		{"ok with extra fields", "POST", "true", `{"client_params":{"id":"a","group":"default","x":1},"y":2}`, ""},
		{"GET", "GET", "true", body("a", "default"), KindMethodNotAllowed},
		{"no header", "POST", "", body("a", "default"), KindMissingHeader},
		{"header not true", "POST", "false", body("a", "default"), KindMissingHeader},
		{"header True", "POST", "True", body("a", "default"), KindMissingHeader},
		{"not JSON", "POST", "true", `{"client_params":`, KindInvalidRequest},
		{"no client_params", "POST", "true", `{"id":"a","group":"default"}`, KindInvalidRequest},
		{"empty id", "POST", "true", body("", "default"), KindInvalidClientIdentity},
		{"id with slash", "POST", "true", body("a/b", "default"), KindInvalidClientIdentity},
		{"id with space", "POST", "true", body("a b", "default"), KindInvalidClientIdentity},
		{"id with newline", "POST", "true", body(`a\nb`, "default"), KindInvalidClientIdentity},
		{"id non-ASCII", "POST", "true", body("nœud", "default"), KindInvalidClientIdentity},
		{"id too long", "POST", "true", body(strings.Repeat("a", maxIDLen+1), "default"), KindInvalidClientIdentity},
		{"id longest", "POST", "true", body(strings.Repeat("a", maxIDLen), "default"), ""},
		{"empty group", "POST", "true", body("a", ""), KindInvalidGroup},
		{"group with underscore", "POST", "true", body("a", "my_group"), KindInvalidGroup},
		{"group with slash", "POST", "true", body("a", "a/b"), KindInvalidGroup},
		{"group not served", "POST", "true", body("a", "masters"), KindUnknownGroup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(tc.method, tc.header, []byte(tc.body), served)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "" && (p.ID == "" || p.Group == ""):
				t.Fatalf("accepted without params: %+v", p)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted %+v, want %s", p, tc.want)
			case tc.want != "" && (err.Kind != tc.want || err.Value == ""):
				t.Fatalf("got %s (%q), want %s with a description", err.Kind, err.Value, tc.want)
			}
		})
	}
}

// TestKindStatus: only ok is a 200; every error is a 4xx or 5xx, as the
// protocol requires, and every kind is listed for metrics.
func TestKindStatus(t *testing.T) {
	for _, k := range Kinds {
		st := k.Status()
		if (k == KindOK) != (st == http.StatusOK) || (k != KindOK && st < 400) {
			t.Errorf("%s: status %d", k, st)
		}
	}
	if len(Kinds) > 18 {
		t.Errorf("%d kinds: the protocol wants a small fixed set", len(Kinds))
	}
}
