package guard

import (
	"os"
	"syscall"
)

// KernelFile is a sysfs, procfs or cgroup file kept open and read again
// from offset 0 each time: the kernel renders such a file afresh for a
// read at offset 0, and an open cost ~0.5 ms of CPU in the TCG guest,
// where the guard and the memory pacer read several a second. A failed
// read reopens the path once: a removed cgroup (its unit stopped or
// restarted) or disk fails reads with ENODEV, and a unit started again
// gets a new cgroup under the same path.
type KernelFile struct {
	Path string
	// Pread reads at an offset (nil: pread(2)). Tests inject the
	// kernel's failures: a regular file removed under an open descriptor
	// still reads.
	Pread func(fd int, p []byte, off int64) (int, error)

	fd   int
	open bool
	buf  []byte
}

// Read returns the file's content in a buffer reused by the next Read.
func (f *KernelFile) Read() ([]byte, error) {
	if f.open {
		if b, err := f.read(); err == nil {
			return b, nil
		}
		f.Close() // gone, or broken: the path may name a new file now
	}
	fd, err := openRead(f.Path)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: f.Path, Err: err}
	}
	f.fd, f.open = fd, true
	b, err := f.read()
	if err != nil {
		f.Close()
		return nil, &os.PathError{Op: "read", Path: f.Path, Err: err}
	}
	return b, nil
}

// read reads the whole file from offset 0. A short read is the end: the
// kernel's seq files fill what they are asked for while they have
// content, so one pread(2) reads a small file, where read(2) takes a
// second call to see the end.
func (f *KernelFile) read() ([]byte, error) {
	pread := f.Pread
	if pread == nil {
		pread = syscall.Pread
	}
	if f.buf == nil {
		f.buf = make([]byte, 4096)
	}
	b := f.buf[:0]
	for {
		n, err := pread(f.fd, b[len(b):cap(b)], int64(len(b)))
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, err
		}
		b = b[:len(b)+n]
		if len(b) < cap(b) {
			f.buf = b[:0]
			return b, nil
		}
		b = append(b, 0)[:len(b)] // full: grow and read on
	}
}

// Close closes the descriptor; a later Read opens the path again.
func (f *KernelFile) Close() error {
	if !f.open {
		return nil
	}
	f.open = false
	return syscall.Close(f.fd)
}

func openRead(name string) (int, error) {
	for {
		fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}
