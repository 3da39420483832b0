package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTheDataDirectoryIsPrivate: the embedded data directory is created
// 0700 and every file in it 0600 (the database and its -wal and -shm, the
// generated master key); one that others could read is tightened at
// start, and each change is logged.
func TestTheDataDirectoryIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"SLUICE_DATA_DIR": dir, "SLUICE_BCRYPT_COST": "4"}
	modes := func(when string) {
		t.Helper()
		if m := perm(t, dir); m != 0o700 {
			t.Errorf("%s: the data directory is %04o, want 0700", when, m)
		}
		for _, name := range []string{"sluice.db", "sluice.db-wal", "sluice.db-shm", "master.key"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Errorf("%s: %v", when, err)
			}
		}
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && path != dir {
				if m := perm(t, path); d.IsDir() && m&0o077 != 0 || !d.IsDir() && m&0o177 != 0 {
					t.Errorf("%s: %s is %04o; want 0700 for a directory, 0600 for a file", when, path, m)
				}
			}
			return nil
		})
	}
	base, _, stop := start(t, env)
	c := client{t, base}
	var owner struct{ Token string }
	if r := c.call("POST", "/api/auth/signup", "", `{"email":"modes@example.com","password":"password123","organization":"Modes"}`, &owner); r.StatusCode != 201 {
		t.Fatalf("signup: %d", r.StatusCode)
	}
	modes("created")
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// Loosened (an older Sluice, a copy, a restore): tightened at start.
	loose := map[string]fs.FileMode{"": 0o755, "sluice.db": 0o644, "master.key": 0o644, "backup": 0o755, "backup/sluice.db.bak": 0o664}
	if err := os.Mkdir(filepath.Join(dir, "backup"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "backup", "sluice.db.bak"), []byte("old"), 0o664); err != nil {
		t.Fatal(err)
	}
	for name, m := range loose {
		if err := os.Chmod(filepath.Join(dir, name), m); err != nil {
			t.Fatal(err)
		}
	}
	base, out, stop := start(t, env)
	defer stop()
	if r := (client{t, base}).call("POST", "/api/auth/login", "", `{"email":"modes@example.com","password":"password123"}`, nil); r.StatusCode != 200 {
		t.Fatalf("login after the tightening: %d", r.StatusCode)
	}
	modes("tightened")
	for name, m := range loose {
		path := filepath.Join(dir, name)
		if !logged(out.String(), "the data directory was readable by others: tightened", "path="+path+" ", fmt.Sprintf("from=%04o to=%04o", m, m&^0o077)) {
			t.Errorf("no log line says %s (%04o) was tightened:\n%s", path, m, out.String())
		}
	}
}

// logged says whether one line of the log has every one of parts.
func logged(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			return true
		}
	}
	return false
}

func perm(t *testing.T, path string) fs.FileMode {
	t.Helper()
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}
