package api

// UsageBudget is one limit with what has been used against it.
type UsageBudget struct {
	Name string `json:"name"`
	// Limit is the configured limit; 0 means none.
	Limit float64 `json:"limit"`
	Used  float64 `json:"used"`
	// Remaining is Limit - Used, at least 0; absent when there is no limit.
	Remaining *float64 `json:"remaining,omitempty"`
	Unit      string   `json:"unit"`
}

// UsageTotals sums what a tenant or a session used.
type UsageTotals struct {
	Execs       int64   `json:"execs"`
	Running     int64   `json:"running"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	WallSeconds float64 `json:"wall_seconds"`
	FetchBytes  int64   `json:"fetch_bytes"`
}

// TenantUsageReport is the body of GET /usage: the tenant's use today.
type TenantUsageReport struct {
	Tenant  string        `json:"tenant"`
	Day     string        `json:"day"`
	Used    UsageTotals   `json:"used"`
	Budgets []UsageBudget `json:"budgets"`
}

// SessionUsageReport is the body of GET /usage?session=ID.
type SessionUsageReport struct {
	Tenant  string        `json:"tenant"`
	Session string        `json:"session"`
	Used    UsageTotals   `json:"used"`
	Budgets []UsageBudget `json:"budgets"`
}
