package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		fmt.Printf("hello from microlet at %s\n", time.Now().UTC().Format(time.RFC3339))
		select {
		case <-stop:
			fmt.Println("hello: stopping")
			return
		case <-tick.C:
		}
	}
}
