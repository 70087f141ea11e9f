package space

import "golang.org/x/sys/windows"

// statfs is the free space (for this process's user) and the size of the
// volume dir is on.
func statfs(dir string) (free, total uint64, err error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, 0, err
	}
	if err := windows.GetDiskFreeSpaceEx(p, &free, &total, nil); err != nil {
		return 0, 0, err
	}
	return free, total, nil
}
