// Package durable writes files so that they survive a crash or a power loss: their contents
// and their names.
package durable

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// SyncDir makes the entries of directory dir durable: a new or renamed file's name is durable
// only once its directory is synced. Where the file system cannot sync a directory (EINVAL),
// nothing more can be done, and nil is returned.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// WriteFile replaces the file at path with data, whole or not at all: data goes to a file
// beside it, synced, then renamed over it, and the directory is synced. A crash or a failed
// write leaves the file as it was.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return SyncDir(dir)
}
