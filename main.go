// Sluice is a metered gateway for text-generation APIs. See README.md.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/internal/app"
	"github.com/sluicehq/sluice/internal/gcfloor"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if os.Getenv("GOGC") == "" { // an operator's GOGC is theirs
		defer gcfloor.Follow(gcHeapFloor)()
	}
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

// gcHeapFloor is the smallest heap goal the garbage collector gets: it
// runs a tenth as often on the embedded default's small heap, whose
// collections made the tail at load (docs/BENCHMARKS.md).
const gcHeapFloor = 64 << 20

// run is Sluice as the command line starts it: built from its arguments and
// environment, serving until ctx ends, then shut down in order.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return app.Run(ctx, args, getenv, stdout, app.Options{})
}
