package app

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestTheReadmeTellsTheImports holds the README's table of layers to what
// `go list` says: every package of ours is in it (but tools, system tests
// and test helpers), and each imports only from layers above its own.
func TestTheReadmeTellsTheImports(t *testing.T) {
	const module = "github.com/sluicehq/sluice"
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	layer := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(string(readme)))
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) != 4 {
			continue
		}
		num, _, ok := strings.Cut(strings.TrimSpace(cells[1]), ".")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			continue
		}
		for _, p := range strings.Split(cells[2], ",") {
			layer[strings.TrimSpace(p)] = n
		}
	}
	if len(layer) < 20 {
		t.Fatalf("the README's table of layers has %d packages: not found", len(layer))
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	name := func(path string) string {
		if path == module {
			return "main"
		}
		return strings.TrimPrefix(path, module+"/")
	}
	leftOut := func(p string) bool {
		for _, prefix := range []string{"cmd/", "e2e", "docs/", "internal/testdb", "internal/testredis", "internal/testsync",
			"internal/clocktest", "internal/csptest", "internal/faultproxy", "internal/testjobs", "internal/testmail", "internal/teststripe"} {
			if strings.HasPrefix(p, prefix) {
				return true
			}
		}
		return false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := name(fields[0])
		if leftOut(pkg) {
			continue
		}
		own, ok := layer[pkg]
		if !ok {
			t.Errorf("%s is not in the README's table of layers", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			dep := name(imp)
			if l, ok := layer[dep]; !ok || l >= own {
				t.Errorf("%s (layer %d) imports %s (layer %d): only layers above its own", pkg, own, dep, l)
			}
		}
	}
}
