package lock

import (
	"testing"
	"time"
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

func TestAfterDeletion(t *testing.T) {
	me := Entry{"m", 50}
	tests := []struct {
		name    string
		earlier int
		deleted Entry
		want    int
		wantOK  bool
	}{
		{"holder ahead released", 4, Entry{"a", 10}, 3, true},
		{"waiter ahead left", 4, Entry{"b", 49}, 3, true},
		{"key behind left", 4, Entry{"z", 51}, 4, true},
		{"last one ahead", 1, Entry{"a", 10}, 0, true},
		// Keys created in one transaction share a revision; the name orders
		// them, as in Order.
		{"same revision, name before", 2, Entry{"a", 50}, 1, true},
		{"same revision, name after", 2, Entry{"z", 50}, 2, true},
		{"own key deleted: read again", 2, Entry{"m", 50}, 2, false},
		{"no previous value: read again", 2, Entry{"a", 0}, 2, false},
		{"count already zero: read again", 0, Entry{"a", 10}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := AfterDeletion(me, tt.earlier, tt.deleted)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("AfterDeletion(%v, %d, %v) = %d, %v; want %d, %v",
					me, tt.earlier, tt.deleted, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestAfterDeletionMatchesLocate: counting deletions from one read gives the
// position Locate gives on a fresh read, whatever the order of deletions.
func TestAfterDeletionMatchesLocate(t *testing.T) {
	q := []Entry{{"a", 3}, {"b", 5}, {"c", 5}, {"d", 8}, {"e", 9}, {"m", 12}, {"x", 13}, {"y", 20}}
	for _, slots := range []int{1, 2, 3} {
		for _, del := range [][]string{{"a", "b", "c"}, {"y", "d", "x", "a"}, {"e", "d", "c", "b", "a"}} {
			pos, _ := Locate(q, slots, "m")
			earlier := pos.Index
			alive := append([]Entry(nil), q...)
			for _, name := range del {
				var gone Entry
				for i, e := range alive {
					if e.Node == name {
						gone = e
						alive = append(alive[:i], alive[i+1:]...)
						break
					}
				}
				var ok bool
				if earlier, ok = AfterDeletion(Entry{"m", 12}, earlier, gone); !ok {
					t.Fatalf("slots %d, deleting %v: %s not counted", slots, del, name)
				}
				want, _ := Locate(alive, slots, "m")
				if got := PositionAt(earlier, len(alive), slots); got != want {
					t.Errorf("slots %d, after deleting %s of %v: counted %+v, Locate %+v", slots, name, del, got, want)
				}
			}
		}
	}
}

// etcd reports a lease's remaining time truncated to whole seconds.
func TestSpacingLeft(t *testing.T) {
	for _, c := range []struct {
		ttl, granted int64
		want         time.Duration
	}{
		{0, 5, time.Second}, // under a second left: still alive
		{2, 5, 3 * time.Second},
		{4, 5, 5 * time.Second},
		{5, 5, 5 * time.Second}, // just renewed: never over the interval
		{3, 0, 4 * time.Second},
	} {
		if got := SpacingLeft(c.ttl, c.granted); got != c.want {
			t.Errorf("SpacingLeft(%d, %d) = %v, want %v", c.ttl, c.granted, got, c.want)
		}
	}
}
