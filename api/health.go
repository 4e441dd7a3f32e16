package api

// ReadyCheck is one readiness check's outcome.
type ReadyCheck struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Optional checks do not make the service unready when they fail: only
	// the profiles that need them are refused (see runtimeChecks).
	Optional bool   `json:"optional,omitempty"`
	Error    string `json:"error,omitempty"`
}
