package lock

import (
	"reflect"
	"testing"
)

func TestLocate(t *testing.T) {
	q := []Entry{{"c", 30}, {"a", 10}, {"d", 40}, {"b", 20}}
	tests := []struct {
		name    string
		entries []Entry
		slots   int
		node    string
		want    Position
		ok      bool
	}{
		{"first of one slot holds", q, 1, "a", Position{Holder: true, Index: 0, Queued: 4, Slots: 1}, true},
		{"second of one slot waits first", q, 1, "b", Position{Index: 1, Ahead: 0, Queued: 4, Slots: 1}, true},
		{"last of one slot", q, 1, "d", Position{Index: 3, Ahead: 2, Queued: 4, Slots: 1}, true},
		{"second of two slots holds", q, 2, "b", Position{Holder: true, Index: 1, Queued: 4, Slots: 2}, true},
		{"third of two slots waits", q, 2, "c", Position{Index: 2, Ahead: 0, Queued: 4, Slots: 2}, true},
		{"more slots than entries", q, 9, "d", Position{Holder: true, Index: 3, Queued: 4, Slots: 9}, true},
		{"not queued", q, 2, "x", Position{Queued: 4, Slots: 2}, false},
		{"empty queue", nil, 1, "a", Position{Slots: 1}, false},
		{"zero slots holds nobody", q, 0, "a", Position{Index: 0, Ahead: 0, Queued: 4}, true},
		// Order is by revision, not by name or arrival in the slice.
		{"revision beats name", []Entry{{"z", 5}, {"a", 6}}, 1, "z", Position{Holder: true, Queued: 2, Slots: 1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Locate(tt.entries, tt.slots, tt.node)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Locate(%s) = %+v, %v; want %+v, %v", tt.node, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestSplit(t *testing.T) {
	q := []Entry{{"c", 30}, {"a", 10}, {"b", 20}}
	h, w := Split(q, 2)
	if want := []Entry{{"a", 10}, {"b", 20}}; !reflect.DeepEqual(h, want) {
		t.Errorf("holders %v, want %v", h, want)
	}
	if want := []Entry{{"c", 30}}; !reflect.DeepEqual(w, want) {
		t.Errorf("waiters %v, want %v", w, want)
	}
	if h, w := Split(q, 5); len(h) != 3 || len(w) != 0 {
		t.Errorf("Split with spare slots: %v %v", h, w)
	}
}
