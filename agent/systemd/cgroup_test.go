package systemd

import "testing"

// Where a service not running will get its cgroup, as systemd.slice(5)
// spells nested slices.
func TestSliceCgroup(t *testing.T) {
	const u = "rpm-ostreed.service"
	for _, c := range []struct{ slice, want string }{
		{"system.slice", "/system.slice/" + u},
		{"custom.slice", "/custom.slice/" + u},
		{"foo-bar.slice", "/foo.slice/foo-bar.slice/" + u},
		{"foo-bar-baz.slice", "/foo.slice/foo-bar.slice/foo-bar-baz.slice/" + u},
		{`a\x2db.slice`, `/a\x2db.slice/` + u}, // an escaped dash is in the name
		{"-.slice", "/" + u},
		{"", ""},
		{"system", ""},
	} {
		if got := SliceCgroup(c.slice, u); got != c.want {
			t.Errorf("SliceCgroup(%q) = %q, want %q", c.slice, got, c.want)
		}
	}
}
