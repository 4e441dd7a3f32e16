package api

// FetchRequest is the body of POST /fetch.
type FetchRequest struct {
	URL string `json:"url"`
	// Profile names an egress profile; empty: the tenant's fetch_profile.
	Profile string `json:"profile,omitempty"`
	// Format is "text" (default) or "markdown".
	Format string `json:"format,omitempty"`
	// MaxBytes lowers the profile's max_response_bytes. A body over the
	// cap is cut there and the result marked truncated.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// Selector keeps only the elements a CSS selector matches (HTML only).
	Selector string `json:"selector,omitempty"`
	// Links is "none", "text" (default) or "full" (targets listed at the end).
	Links string `json:"links,omitempty"`
	// Content is "full" (default: the whole visible page) or "main" (only
	// its main content; HTML only, not with Selector).
	Content string `json:"content,omitempty"`
	// Render, when true, loads the page in headless Chromium inside a
	// locked-down browser sandbox whose only way out is the egress proxy,
	// and reads what the browser shows (a page whose text its script
	// writes). Absent: the egress profile's render.hosts decide; false:
	// never rendered.
	Render *bool `json:"render,omitempty"`
}

// Content values of FetchRequest and FetchResponse.
const (
	ContentFull = "full"
	ContentMain = "main"
)

// FetchWarning says where the returned content may differ from the page
// as a reader sees it. Code is stable; Message is sandboxd's words, never
// the page's.
type FetchWarning struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Warning codes of FetchResponse.
const (
	// WarnTruncated: the body was cut at the egress profile's cap, at
	// max_bytes or at the fetched-bytes budget; content is its first part.
	WarnTruncated = "TRUNCATED"
	// WarnOutputCut: the text was cut at the output cap.
	WarnOutputCut = "OUTPUT_CUT"
	// WarnPageHidden: the page's style sheet hides the whole page until
	// its script shows it; it was shown.
	WarnPageHidden = "PAGE_HIDDEN_UNTIL_SCRIPT"
	// WarnMainFallback: content "main" was asked, but no main content was
	// found or it looked too thin: the whole page was returned.
	WarnMainFallback = "MAIN_CONTENT_FALLBACK"
	// WarnRenderTimeout: the rendered page did not settle within the
	// render's time limit; content is what it showed then.
	WarnRenderTimeout = "RENDER_TIMEOUT"
	// WarnRenderCut: the browser downloaded more than the byte cap in
	// force; its connections were cut there and content is what the page
	// showed then.
	WarnRenderCut = "RENDER_BYTES_CUT"
	// WarnInvisibleText: the PDF has text drawn invisibly (render mode 3,
	// usually a scan's OCR layer); it is kept in content.
	WarnInvisibleText = "INVISIBLE_TEXT_LAYER"
)

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
	// Truncated: the cap (the profile's, max_bytes or the fetched-bytes
	// budget) cut the body, or the text was cut at the output cap; a
	// warning says which.
	Truncated bool `json:"truncated"`
	// ContentMode is what content holds: "full" or "main" (the page's
	// main content). A request for main that fell back to the whole page
	// says full, with a warning.
	ContentMode string `json:"content_mode"`
	// WordsOmitted, with content_mode main, counts the visible words of
	// the page left out of content.
	WordsOmitted int `json:"words_omitted,omitempty"`
	// Rendered is true when a browser sandbox loaded the page (render).
	Rendered bool `json:"rendered"`
	// Pages counts the pages of a PDF (0 for other content).
	Pages int `json:"pages,omitempty"`
	// Warnings say where content may differ from what a reader of the
	// page sees (never empty in JSON: [] when none).
	Warnings      []FetchWarning `json:"warnings"`
	BytesReceived int64          `json:"bytes_received"`
	Redactions    map[string]int `json:"redactions"`
	Profile       ProfileRef     `json:"profile"`
	CaptureID     string         `json:"capture_id"`
}
