package fleetlock

import (
	"sync"
	"time"
)

// Rate bounds the requests of one client address: Burst at once, then one
// every Every. Each request that passes the protocol checks costs etcd
// reads (and the member check a MemberList) before any other bound applies.
type Rate struct {
	Burst int
	Every time.Duration
}

// DefaultRate lets a client ask 20 times at once and 20 times a minute
// after: zincati asks every 5 minutes while it waits, so many clients
// behind one address (NAT) still fit.
var DefaultRate = Rate{Burst: 20, Every: 3 * time.Second}

// bucket is one address's token bucket.
type bucket struct {
	tokens float64
	at     time.Time // when tokens was counted
}

// take spends a token of b at now, refilling it at r first; ok is false
// (b only refilled) when none is left. A new bucket (zero at) is full, and
// a clock that went back refills nothing.
func take(b bucket, now time.Time, r Rate) (bucket, bool) {
	switch {
	case b.at.IsZero():
		b.tokens = float64(r.Burst)
	case now.After(b.at) && r.Every > 0:
		b.tokens = min(float64(r.Burst), b.tokens+float64(now.Sub(b.at))/float64(r.Every))
	}
	if now.After(b.at) || b.at.IsZero() {
		b.at = now
	}
	if b.tokens < 1 {
		return b, false
	}
	b.tokens--
	return b, true
}

// full says whether b, at now, has refilled completely: forgetting it
// changes nothing.
func full(b bucket, now time.Time, r Rate) bool {
	return r.Every <= 0 || b.tokens+float64(now.Sub(b.at))/float64(r.Every) >= float64(r.Burst)
}

// maxBuckets bounds the addresses remembered; beyond it (after the full
// buckets are forgotten) new addresses share one bucket, so many addresses
// (an IPv6 prefix) cost memory only up to the bound.
const maxBuckets = 4096

// limiter is the per-address rate limit of a server.
type limiter struct {
	rate Rate
	mu   sync.Mutex
	b    map[string]bucket
}

// allow spends a token of addr's bucket at now.
func (l *limiter) allow(addr string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b == nil {
		l.b = map[string]bucket{}
	}
	if _, ok := l.b[addr]; !ok && len(l.b) >= maxBuckets {
		for a, b := range l.b {
			if full(b, now, l.rate) {
				delete(l.b, a)
			}
		}
		if len(l.b) >= maxBuckets {
			addr = "" // the shared overflow bucket
		}
	}
	b, ok := take(l.b[addr], now, l.rate)
	l.b[addr] = b
	return ok
}
