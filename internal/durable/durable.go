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

// CreateFile writes data to a new file at path, whole or not at all, and never replaces a
// file already there (os.ErrExist): data goes to a file beside it, synced, which is then
// linked at path, and the directory is synced. A crash or a failed write leaves no file at
// path, so the same call can be made again.
func CreateFile(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Named as the file asked for ("create PATH: file exists"), not the file beside it.
		if lerr := os.Link(tmp, path); lerr != nil {
			var le *os.LinkError
			if errors.As(lerr, &le) {
				lerr = &os.PathError{Op: "create", Path: path, Err: le.Err}
			}
			err = lerr
		}
	}
	if err != nil {
		return err
	}
	return SyncDir(dir)
}
