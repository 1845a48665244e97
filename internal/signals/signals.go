package signals

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Context returns a context cancelled by the first SIGINT/SIGTERM; a second
// signal exits the process with status 1.
func Context() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ch
		cancel()
		<-ch
		os.Exit(1)
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel()
	}
}
