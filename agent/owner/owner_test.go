package owner

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/update-agent/update-agent/agent/systemd"
)

func unit(name, load, file, active string) systemd.UnitFile {
	return systemd.UnitFile{Name: name, LoadState: load, UnitFileState: file, ActiveState: active}
}

const timer, service = "bootc-fetch-apply-updates.timer", "bootc-fetch-apply-updates.service"

func TestLive(t *testing.T) {
	for _, c := range []struct {
		u    systemd.UnitFile
		live bool
	}{
		{unit(timer, "loaded", "enabled", "active"), true},      // a Fedora bootc image as shipped
		{unit(timer, "loaded", "enabled", "inactive"), true},    // enabled, not yet started: starts at the next boot
		{unit(timer, "loaded", "disabled", "active"), true},     // started by hand
		{unit(service, "loaded", "static", "activating"), true}, // the upgrade running now
		{unit(timer, "loaded", "enabled-runtime", "active"), true},
		{unit(timer, "loaded", "disabled", "inactive"), false},
		{unit(service, "loaded", "static", "inactive"), false}, // only its timer starts it
		{unit(timer, "masked", "masked", "inactive"), false},
		{unit(timer, "masked", "masked-runtime", "inactive"), false},
		{unit(timer, "not-found", "", "inactive"), false}, // not an image-mode host
	} {
		if got := Live(c.u); got != c.live {
			t.Errorf("Live(%+v) = %v, want %v", c.u, got, c.live)
		}
	}
}

func TestDecide(t *testing.T) {
	shipped := []systemd.UnitFile{unit(timer, "loaded", "enabled", "active"), unit(service, "loaded", "static", "inactive")}
	masked := []systemd.UnitFile{unit(timer, "masked", "masked", "inactive"), unit(service, "masked", "masked", "inactive")}
	absent := []systemd.UnitFile{unit(timer, "not-found", "", "inactive"), unit(service, "not-found", "", "inactive")}

	v := Decide(shipped, false)
	if !errors.Is(v.Err, ErrForeignUpdater) || v.Mask || len(v.Live) != 1 {
		t.Fatalf("timer enabled, no consent: %+v, want a refusal naming the timer", v)
	}
	for _, want := range []string{timer + " (enabled, active)", "systemctl mask --now", "updates.mask_bootc_timer"} {
		if !strings.Contains(v.Err.Error(), want) {
			t.Errorf("refusal %q does not say %q", v.Err, want)
		}
	}
	if v := Decide(shipped, true); v.Err != nil || !v.Mask {
		t.Errorf("timer enabled, consent: %+v, want it masked", v)
	}
	for name, us := range map[string][]systemd.UnitFile{"masked": masked, "absent": absent} {
		for _, consent := range []bool{false, true} {
			if v := Decide(us, consent); v.Err != nil || v.Mask || len(v.Live) != 0 {
				t.Errorf("%s, consent %v: %+v, want nothing to do", name, consent, v)
			}
		}
	}
}

type fakeUnits struct {
	units  map[string]systemd.UnitFile
	masked []string
	inEtc  bool // the unit files are in /etc: a runtime mask does not take
}

func (f *fakeUnits) UnitFile(_ context.Context, n string) (systemd.UnitFile, error) {
	if u, ok := f.units[n]; ok {
		return u, nil
	}
	return unit(n, "not-found", "", "inactive"), nil
}

func (f *fakeUnits) MaskRuntime(_ context.Context, us ...string) error {
	f.masked = append(f.masked, us...)
	if !f.inEtc {
		for _, u := range us {
			f.units[u] = unit(u, "masked", "masked-runtime", "inactive")
		}
	}
	return nil
}

// TestFenceMasksBoth: with consent both units are masked, the service too
// (the timer triggers it); without it nothing is touched.
func TestFenceMasksBoth(t *testing.T) {
	live := map[string]systemd.UnitFile{timer: unit(timer, "loaded", "enabled", "active")}
	f := &fakeUnits{units: live}
	if v, err := Fence(context.Background(), f, false); err != nil || v.Err == nil || len(f.masked) != 0 {
		t.Fatalf("no consent: %+v, %v, masked %v; want a refusal and nothing masked", v, err, f.masked)
	}
	if v, err := Fence(context.Background(), f, true); err != nil || v.Err != nil || !slices.Equal(f.masked, BootcUnits) {
		t.Fatalf("consent: %+v, %v, masked %v; want %v masked", v, err, f.masked, BootcUnits)
	}
	if v, err := Fence(context.Background(), f, true); err != nil || v.Mask {
		t.Fatalf("masked already: %+v, %v; want nothing to do", v, err)
	}
}

// TestFenceMaskThatDoesNotTake: a runtime mask under a unit file in /etc
// leaves the timer live: that is a refusal, not a success.
func TestFenceMaskThatDoesNotTake(t *testing.T) {
	f := &fakeUnits{inEtc: true, units: map[string]systemd.UnitFile{timer: unit(timer, "loaded", "enabled", "active")}}
	_, err := Fence(context.Background(), f, true)
	if !errors.Is(err, ErrForeignUpdater) || !strings.Contains(err.Error(), "outranks a runtime mask") {
		t.Fatalf("mask that did not take: %v, want a refusal saying why", err)
	}
}

func TestDescribe(t *testing.T) {
	shipped := []systemd.UnitFile{unit(timer, "loaded", "enabled", "active"), unit(service, "loaded", "static", "inactive")}
	absent := []systemd.UnitFile{unit(timer, "not-found", "", "inactive")}
	if _, err := Describe(shipped, false); !errors.Is(err, ErrForeignUpdater) {
		t.Errorf("enabled without consent: %v, want a FAIL", err)
	}
	if s, err := Describe(shipped, true); err != nil || !strings.Contains(s, "masks them until each next boot") {
		t.Errorf("enabled with consent: %q, %v", s, err)
	}
	if s, err := Describe(absent, false); err != nil || !strings.Contains(s, timer+" not-found, inactive") {
		t.Errorf("absent: %q, %v", s, err)
	}
}

type brokenUnits struct{ fakeUnits }

func (*brokenUnits) UnitFile(context.Context, string) (systemd.UnitFile, error) {
	return systemd.UnitFile{}, errors.New("org.freedesktop.DBus.Error.ServiceUnknown")
}

// TestFenceUnreadable: a bus without systemd is "cannot tell" (the daemon
// tries again), never a refusal nor a pass.
func TestFenceUnreadable(t *testing.T) {
	v, err := Fence(context.Background(), &brokenUnits{}, true)
	if !errors.Is(err, ErrUnreadable) || errors.Is(err, ErrForeignUpdater) || v.Mask {
		t.Fatalf("unreadable units: %+v, %v; want ErrUnreadable", v, err)
	}
}
