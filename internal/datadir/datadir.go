// Package datadir keeps the embedded data directory private to the user
// Sluice runs as. The directory holds the SQLite database (sessions'
// secret, sealed provider keys, every tenant's data) and the generated
// master key that unseals them: nobody else on the machine may read it.
package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Private is the mode of a data directory Prepare creates: its owner's,
// nobody else's.
const Private fs.FileMode = 0o700

// Change is one mode Prepare tightened.
type Change struct {
	Path     string
	From, To fs.FileMode
}

// Prepare creates dir with mode 0700 when it is missing, and otherwise
// tightens it: the directory and every directory and file under it lose
// every permission of group and others (0755 becomes 0700, 0644 becomes
// 0600; what is tighter stays). Symbolic links are not followed, but for
// dir itself. It returns what it changed, for the caller to log, and an
// error naming the path whose mode it could not change (a directory
// someone else owns): then the data must not be served from there.
func Prepare(dir string) ([]Change, error) {
	if err := os.MkdirAll(dir, Private); err != nil {
		return nil, fmt.Errorf("create the data directory %s: %w", dir, err)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	var changes []Change
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 || !d.IsDir() && !d.Type().IsRegular() {
			return nil // a link, socket or device is not ours to change
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while walking (a SQLite -shm, say)
		} else if err != nil {
			return err
		}
		from := info.Mode().Perm()
		to := from &^ 0o077
		if to == from {
			return nil
		}
		if err := os.Chmod(path, to|info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return fmt.Errorf("the data directory's %s is mode %04o and cannot be made private (make it owned by the user Sluice runs as): %w", path, from, err)
		}
		changes = append(changes, Change{Path: path, From: from, To: to})
		return nil
	})
	return changes, err
}
