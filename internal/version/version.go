package version

// Version of microlet; "dev" for builds without ldflags.
var Version = "dev"

// UserAgent is the HTTP user agent microlet components use towards the API server.
func UserAgent(component string) string { return "microlet-" + component + "/" + Version }
