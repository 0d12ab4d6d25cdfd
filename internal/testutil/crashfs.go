package testutil

import "github.com/cockroachdb/pebble/v2/vfs"

// CrashSafe wraps a crashable MemFS for a store that keeps writing while a
// test takes CrashClones of it. MemFS.ReuseForWrite (a WAL file recycled at
// a WAL rotation) takes the filesystem's clone lock for reading and then,
// in Rename, once more; a CrashClone that asks for the lock between the
// two blocks the second read lock, and both wait forever (pebble v2.1.7,
// vfs/mem_fs.go; seen once in TestCrashRecovery after 10 minutes). Here a
// reused WAL file is a new file instead: Pebble's recycling is an
// optimisation, and what a crash keeps is the same.
func CrashSafe(fs *vfs.MemFS) vfs.FS { return crashSafe{fs} }

type crashSafe struct{ *vfs.MemFS }

func (f crashSafe) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := f.Remove(oldname); err != nil {
		return nil, err
	}
	return f.Create(newname, category)
}
