package datadir_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/datadir"
)

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

// A missing data directory is created 0700; an existing one loses every
// permission of group and others, on itself and everything under it, and
// says what it changed; what is already private, and what a link points
// to, is left alone.
func TestPrepare(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	changes, err := datadir.Prepare(dir)
	if err != nil || len(changes) != 0 {
		t.Fatalf("a new data directory: %v %v", changes, err)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Fatalf("created %04o, want 0700", m)
	}

	outside := filepath.Join(t.TempDir(), "elsewhere")
	write := func(path string, perm fs.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte("x"), perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, perm); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	write(outside, 0o644)
	if err := os.Mkdir(filepath.Join(dir, "spool"), 0o755); err != nil {
		t.Fatal(err)
	}
	for path, perm := range map[string]fs.FileMode{"sluice.db": 0o644, "master.key": 0o600, "spool/part": 0o666, "tool": 0o755, "readonly": 0o444} {
		write(filepath.Join(dir, path), perm)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "spool")} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	changes, err = datadir.Prepare(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]fs.FileMode{"": 0o700, "spool": 0o700, "sluice.db": 0o600, "master.key": 0o600, "spool/part": 0o600, "tool": 0o700, "readonly": 0o400}
	for path, perm := range want {
		if m := mode(t, filepath.Join(dir, path)); m != perm {
			t.Errorf("%s is %04o, want %04o", path, m, perm)
		}
	}
	if m := mode(t, outside); m != 0o644 {
		t.Errorf("a link's target outside the data directory was changed to %04o", m)
	}
	var changed []string
	for _, c := range changes {
		rel, _ := filepath.Rel(dir, c.Path)
		changed = append(changed, rel)
		if c.To != want[filepath.ToSlash(rel)] && !(rel == "." && c.To == 0o700) {
			t.Errorf("change %+v", c)
		}
	}
	slices.Sort(changed)
	if !slices.Equal(changed, []string{".", "readonly", "sluice.db", "spool", "spool/part", "tool"}) {
		t.Errorf("changes reported: %v", changed)
	}
	if changes, err := datadir.Prepare(dir); err != nil || len(changes) != 0 {
		t.Errorf("a private data directory again: %v %v", changes, err)
	}
}
