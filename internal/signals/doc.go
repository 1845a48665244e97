// Package signals gives binaries a context that the first SIGINT or SIGTERM
// cancels (drain and stop cleanly) while a second one exits at once.
package signals
