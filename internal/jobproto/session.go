package jobproto

// Sessions: one sandbox that keeps a Python interpreter (the kernel) alive
// across calls.
//
// A launcher becomes a session host when the first frame it reads is a
// TypeSession frame instead of a TypeJob frame. From then on sandboxd keeps
// the container's stdin open and writes one request frame at a time (a
// call, a file transfer, an interrupt or a restart); the launcher answers
// with sealed frames, all under the SessionInit key and one sequence of
// frame numbers for the whole session:
//
//	sandboxd                         launcher
//	TypeSession (SessionInit)  ->
//	                           <-    TypeReady (the interpreter waits)
//	TypeCall (Call)            ->
//	                           <-    TypeStarted, TypeStdout/TypeStderr...,
//	                                 TypeResult..., TypeFile/TypeSkipped...,
//	                                 TypeCallEnd (CallEnd), always last
//	TypeInterrupt              ->    (during a call: SIGINT to the interpreter)
//	TypeRestart                ->    (kill the interpreter and every process,
//	                           <-     end a running call, start a new one,
//	                                  then TypeReady with Restarted set)
//	TypePut (Put)              ->
//	                           <-    TypeDone (Done)
//	TypeGet (Get)              ->
//	                           <-    TypeFile or TypeSkipped, then TypeDone
//	                           <-    TypeNotice (Notice), unsolicited: the
//	                                 interpreter died between calls and the
//	                                 session cannot go on
//
// sandboxd alone decides when a call has run too long: it sends
// TypeInterrupt at the call's limit, TypeRestart when no CallEnd follows
// within a second, and kills the container when the restart does not come.
// What the interpreter reports about the code (results, exceptions) is data
// from inside the sandbox, capped by the launcher and again by sandboxd.

// Frame types of sessions.
const (
	TypeSession   byte = 'T' // sandboxd -> launcher: JSON SessionInit; the launcher hosts a session
	TypeCall      byte = 'C' // sandboxd -> launcher: JSON Call
	TypeInterrupt byte = 'I' // sandboxd -> launcher: interrupt the running call (empty payload)
	TypeRestart   byte = 'Z' // sandboxd -> launcher: kill the interpreter, start a new one (empty payload)
	TypePut       byte = 'P' // sandboxd -> launcher: JSON Put
	TypeGet       byte = 'G' // sandboxd -> launcher: JSON Get
	TypeReady     byte = 'Y' // launcher -> sandboxd: JSON Ready
	TypeResult    byte = 'V' // launcher -> sandboxd: JSON RichResult, one per result of a call
	TypeCallEnd   byte = 'D' // launcher -> sandboxd: JSON CallEnd, the last frame of a call
	TypeDone      byte = 'K' // launcher -> sandboxd: JSON Done, the answer to a Put or a Get
	TypeNotice    byte = 'N' // launcher -> sandboxd: JSON Notice, unsolicited
)

// SessionInit turns a waiting launcher into a session host.
type SessionInit struct {
	// Key seals every frame the launcher sends for the rest of the session.
	Key []byte `json:"key"`
	// Caps on what one call returns from OutDir (files the call created or
	// changed there).
	MaxOutFileBytes  int64 `json:"max_out_file_bytes"`
	MaxOutTotalBytes int64 `json:"max_out_total_bytes"`
	MaxOutCount      int   `json:"max_out_count"`
	// Caps on a call's rich results: the text of a repr or a table, the
	// size of one PNG figure and the number of figures.
	MaxTextBytes   int64 `json:"max_text_bytes"`
	MaxFigureBytes int64 `json:"max_figure_bytes"`
	MaxFigures     int   `json:"max_figures"`
}

// Call is one piece of code to run in the session's interpreter.
type Call struct {
	Code  []byte `json:"code"`
	Stdin []byte `json:"stdin,omitempty"`
	// Files are written under WorkDir before the code runs; existing files
	// are replaced.
	Files []File `json:"files,omitempty"`
	// OutputBytes caps each of stdout and stderr of this call.
	OutputBytes int64 `json:"output_bytes"`
	// TimeoutMS is the call's limit, for information: sandboxd enforces it.
	TimeoutMS int64 `json:"timeout_ms"`
}

// Statuses of a CallEnd.
const (
	CallOK          = "ok"          // the code ran to its end (or SystemExit(0))
	CallError       = "error"       // an exception, or SystemExit with another status
	CallInterrupted = "interrupted" // KeyboardInterrupt from TypeInterrupt
	CallDied        = "died"        // the interpreter exited or was killed during the call
	CallRestarted   = "restarted"   // ended by TypeRestart
)

// CallEnd is the launcher's report on a call.
type CallEnd struct {
	Status   string `json:"status"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	// OOM: the kernel's OOM killer killed in the container during the call.
	OOM bool `json:"oom,omitempty"`
	// Exception describes an uncaught exception (Status error).
	Exception *Exception `json:"exception,omitempty"`
	// StateLost: the interpreter this call ran in is not the one the
	// previous call left (it died between calls and was restarted).
	StateLost       bool  `json:"state_lost,omitempty"`
	StdoutTruncated bool  `json:"stdout_truncated,omitempty"`
	StderrTruncated bool  `json:"stderr_truncated,omitempty"`
	DurationMS      int64 `json:"duration_ms"`
	// UserCPUMS and SysCPUMS are the CPU the container used during the call.
	UserCPUMS int64 `json:"user_cpu_ms"`
	SysCPUMS  int64 `json:"sys_cpu_ms"`
	// CPUTotalMS is the container's CPU since it started: sandboxd charges
	// the budgets with what it grew by since the last charge, so CPU used
	// between calls (threads the code left running) is charged too.
	CPUTotalMS int64 `json:"cpu_total_ms"`
	// MaxRSSKB is the interpreter's peak resident set so far.
	MaxRSSKB int64 `json:"max_rss_kb"`
	// MemoryBytes is the container's memory use after the call.
	MemoryBytes int64  `json:"memory_bytes"`
	Error       string `json:"error,omitempty"` // the launcher could not run the call
}

// Exception is an uncaught exception of a call.
type Exception struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback"`
}

// Kinds of rich results.
const (
	ResultRepr  = "repr"      // Text: repr() of the call's final expression
	ResultTable = "table"     // Text: a pandas DataFrame as a text table
	ResultPNG   = "image/png" // Data: a matplotlib figure as PNG
)

// RichResult is one result of a call besides its output.
type RichResult struct {
	Kind string `json:"kind"`
	Text string `json:"text,omitempty"`
	Data []byte `json:"data,omitempty"`
	// Truncated: Text was cut at the cap.
	Truncated bool `json:"truncated,omitempty"`
	// Omitted says why a figure's data is not included (over a cap).
	Omitted string `json:"omitted,omitempty"`
}

// Ready says the session's interpreter waits for calls.
type Ready struct {
	// Restarted: this follows a TypeRestart (or a death between calls);
	// the interpreter is new and the session's state is gone.
	Restarted   bool   `json:"restarted,omitempty"`
	CPUTotalMS  int64  `json:"cpu_total_ms"`
	MemoryBytes int64  `json:"memory_bytes"`
	Error       string `json:"error,omitempty"` // no interpreter could be started
}

// Put writes files under WorkDir, replacing existing ones. Paths are
// checked with CheckPath and never followed through symbolic links.
type Put struct {
	Files []File `json:"files"`
}

// Get reads one regular file under WorkDir, at most MaxBytes.
type Get struct {
	Path     string `json:"path"`
	MaxBytes int64  `json:"max_bytes"`
}

// Done answers a Put or a Get.
type Done struct {
	Error string `json:"error,omitempty"`
	// NotFound: a Get's file does not exist.
	NotFound bool `json:"not_found,omitempty"`
}

// Notice tells sandboxd about something that happened between calls.
type Notice struct {
	// OOM: the interpreter was killed at the memory limit.
	OOM     bool   `json:"oom,omitempty"`
	Message string `json:"message"`
}
