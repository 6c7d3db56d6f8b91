package guest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// QMP runs one QEMU Machine Protocol command (e.g. "query-block") with args
// (nil or a JSON-marshalable value) and returns its "return" value.
func (g *Guest) QMP(ctx context.Context, command string, args any) (json.RawMessage, error) {
	g.qmpMu.Lock() // qemu serves one QMP client at a time
	defer g.qmpMu.Unlock()
	return qmpCall(ctx, g.qmpPath(), command, args)
}

// Disk names a throttled disk of the guest.
type Disk int

const (
	// DataDisk is the data disk (DataDevice, mounted at DataDir).
	DataDisk Disk = iota
	// RootDisk is the root disk (vda): on the ostree guest, the sysroot.
	RootDisk
)

func (d Disk) String() string {
	if d == RootDisk {
		return "root disk"
	}
	return "data disk"
}

// qdev is the disk's virtio-blk-pci device id; QMP's block commands want
// the virtio-blk device inside it, which owns the block backend (qom).
func (d Disk) qdev() string {
	if d == RootDisk {
		return rootDiskID
	}
	return dataDiskID
}

func (d Disk) qom() string {
	if d == RootDisk {
		return rootDiskQOM
	}
	return dataDiskQOM
}

// SetThrottle changes the data disk's throttling while the guest runs
// (block_set_io_throttle; 0 = unthrottled).
func (g *Guest) SetThrottle(ctx context.Context, iops, bps int64) error {
	return g.SetDiskThrottle(ctx, DataDisk, iops, bps)
}

// SetDiskThrottle changes a disk's throttling while the guest runs
// (block_set_io_throttle; 0 = unthrottled). The limits also hold for the
// boots after a reboot of the ostree guest (a qemu of its own each), as a
// cloud disk's do.
func (g *Guest) SetDiskThrottle(ctx context.Context, d Disk, iops, bps int64) error {
	_, err := g.QMP(ctx, "block_set_io_throttle", map[string]any{
		"id":   d.qom(),
		"iops": iops, "iops_rd": 0, "iops_wr": 0,
		"bps": bps, "bps_rd": 0, "bps_wr": 0,
	})
	if err != nil {
		return fmt.Errorf("throttling the %s to %d IOPS, %d B/s: %w", d, iops, bps, err)
	}
	g.procMu.Lock()
	if d == RootDisk {
		g.opts.RootDiskIOPS, g.opts.RootDiskBPS = iops, bps
	} else {
		g.opts.DataDiskIOPS, g.opts.DataDiskBPS = iops, bps
	}
	g.procMu.Unlock()
	return nil
}

// Throttle reports the data disk's current iops and bps limits.
func (g *Guest) Throttle(ctx context.Context) (iops, bps int64, err error) {
	return g.DiskThrottle(ctx, DataDisk)
}

// DiskThrottle reports a disk's current iops and bps limits, as qemu
// reports them (query-block).
func (g *Guest) DiskThrottle(ctx context.Context, d Disk) (iops, bps int64, err error) {
	raw, err := g.QMP(ctx, "query-block", nil)
	if err != nil {
		return 0, 0, err
	}
	return throttleOf(raw, d.qdev())
}

// throttleOf finds the device qdev in a query-block reply.
func throttleOf(raw []byte, qdev string) (iops, bps int64, err error) {
	var devs []struct {
		QDev     string `json:"qdev"`
		Inserted struct {
			IOPS int64 `json:"iops"`
			BPS  int64 `json:"bps"`
		} `json:"inserted"`
	}
	if err := json.Unmarshal(raw, &devs); err != nil {
		return 0, 0, fmt.Errorf("query-block: %w", err)
	}
	for _, d := range devs {
		// qdev is the device's QOM path, e.g. /machine/peripheral/vdata/virtio-backend.
		if d.QDev == qdev || containsPathElem(d.QDev, qdev) {
			return d.Inserted.IOPS, d.Inserted.BPS, nil
		}
	}
	return 0, 0, fmt.Errorf("query-block: no device %q", qdev)
}

func containsPathElem(path, elem string) bool {
	start := 0
	for i := 0; i <= len(path); i++ {
		if i == len(path) || path[i] == '/' {
			if path[start:i] == elem {
				return true
			}
			start = i + 1
		}
	}
	return false
}

type qmpReply struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string          `json:"event"`
	QMP   json.RawMessage `json:"QMP"`
}

// qmpCall connects, negotiates capabilities and runs one command.
func qmpCall(ctx context.Context, sock, command string, args any) (json.RawMessage, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, fmt.Errorf("qmp: %w", err)
	}
	defer conn.Close()
	deadline := time.Now().Add(30 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	r := bufio.NewReader(conn)
	enc := json.NewEncoder(conn)

	next := func() (qmpReply, error) {
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return qmpReply{}, err
			}
			var rep qmpReply
			if err := json.Unmarshal(line, &rep); err != nil {
				return qmpReply{}, fmt.Errorf("decoding %q: %w", line, err)
			}
			if rep.Event == "" { // events may arrive at any time
				return rep, nil
			}
		}
	}
	if rep, err := next(); err != nil || rep.QMP == nil {
		return nil, fmt.Errorf("qmp: no greeting: %v", err)
	}
	exec := func(cmd string, args any) (json.RawMessage, error) {
		req := map[string]any{"execute": cmd}
		if args != nil {
			req["arguments"] = args
		}
		if err := enc.Encode(req); err != nil {
			return nil, err
		}
		rep, err := next()
		if err != nil {
			return nil, err
		}
		if rep.Error != nil {
			return nil, fmt.Errorf("%s: %s", rep.Error.Class, rep.Error.Desc)
		}
		return rep.Return, nil
	}
	if _, err := exec("qmp_capabilities", nil); err != nil {
		return nil, fmt.Errorf("qmp_capabilities: %w", err)
	}
	ret, err := exec(command, args)
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	return ret, nil
}
