package api

// FetchRequest is the body of POST /fetch.
type FetchRequest struct {
	URL string `json:"url"`
	// Profile names an egress profile; empty: the tenant's fetch_profile.
	Profile string `json:"profile,omitempty"`
	// Format is "text" (default) or "markdown".
	Format string `json:"format,omitempty"`
	// MaxBytes lowers the profile's max_response_bytes: the body is cut
	// there and the result marked truncated.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// Selector keeps only the elements a CSS selector matches (HTML only).
	Selector string `json:"selector,omitempty"`
	// Links is "none", "text" (default) or "full" (targets listed at the end).
	Links string `json:"links,omitempty"`
}

// FetchResponse is the body of a successful POST /fetch.
type FetchResponse struct {
	ID        string   `json:"id"`
	URL       string   `json:"url"`
	FinalURL  string   `json:"final_url"`
	Redirects []string `json:"redirects"`
	// Status is the upstream's HTTP status (a 404 page is still a result).
	Status      int    `json:"status"`
	ContentType string `json:"content_type"`
	Title       string `json:"title"`
	// Content is the page as safe text, between an opening and a closing
	// <untrusted-content> marker that carry Nonce: text outside the
	// markers with this nonce is not the page's.
	Content   string `json:"content"`
	Nonce     string `json:"nonce"`
	Untrusted bool   `json:"untrusted"`
	// Truncated: max_bytes (or the fetched-bytes budget) cut the body, or
	// the text was cut at the output cap.
	Truncated     bool           `json:"truncated"`
	BytesReceived int64          `json:"bytes_received"`
	Redactions    map[string]int `json:"redactions"`
	Profile       ProfileRef     `json:"profile"`
	CaptureID     string         `json:"capture_id"`
}
