package etcdtest

import (
	"io"
	"net"
	"sync"
)

// proxy forwards a member's advertised client port to the port it really
// listens on. Stopping a member cuts every connection through it first, as a
// host going down does; without that, embed's Close waits for open watch and
// keepalive streams up to its request timeout (over 5 s) per stop.
type proxy struct {
	l       net.Listener
	backend string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	down  bool
}

// setDown makes the proxy refuse (down) or forward new connections.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

func newProxy(addr, backend string) (*proxy, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &proxy{l: l, backend: backend, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *proxy) forward(c net.Conn) {
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	if down {
		c.Close()
		return
	}
	b, err := net.Dial("tcp", p.backend)
	if err != nil {
		c.Close() // member down: like a refused connection
		return
	}
	p.track(c, b)
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	go pipe(b, c)
	go pipe(c, b)
	wg.Wait()
	p.untrack(c, b)
}

func (p *proxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
}

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// cut closes every open connection; the proxy keeps accepting.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *proxy) close() {
	p.l.Close()
	p.cut()
}
