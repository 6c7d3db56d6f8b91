// Package kernfstest is a test double for reading kernel files
// (guard.KernelFile's Pread): regular files in a test's temporary directory
// stand in for cgroup and /sys files.
package kernfstest

import "syscall"

// Pread is pread(2) failing as kernfs does once the file is removed
// (ENODEV): a regular file removed under an open descriptor still reads, a
// removed cgroup's or disk's files do not.
func Pread(fd int, p []byte, off int64) (int, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err == nil && st.Nlink == 0 {
		return 0, syscall.ENODEV
	}
	return syscall.Pread(fd, p, off)
}
