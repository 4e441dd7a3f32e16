package jobproto

// Cells: a long-lived, locked-down container (the cell host) that serves one
// tenant's runs of one profile, each in a fresh cell: new user, PID, mount,
// IPC, UTS and network namespaces built by bubblewrap, a fresh directory
// for each of /tmp, /sandbox and /dev/shm, and the profile's seccomp
// filter installed before the code starts. One run at a time; when a run
// ends its cell's PID namespace dies with its init, and its files with its
// directory, before the next cell is built.
//
// The launcher is a cell host when it starts with --cell. sandboxd writes a
// TypeCellHost frame first, then one TypeJob frame per run; the launcher
// answers with sealed frames: the first Ready under the CellInit key, each
// job's frames and the Ready after them under that job's Key, a sequence
// of their own:
//
//	sandboxd                         launcher
//	TypeCellHost (CellInit)    ->
//	                           <-    TypeReady (a cell is built; its
//	                                 interpreter has imported the preload)
//	TypeJob (Job)              ->
//	                           <-    TypeStarted, TypeStdout/TypeStderr...,
//	                                 TypeFile/TypeSkipped..., TypeExit
//	                           <-    TypeReady (the next cell waits)
//	TypeJob ...
//	                           <-    TypeNotice (Notice): no next cell can
//	                                 be built; the host is done

// TypeCellHost turns a launcher started with --cell into a cell host.
const TypeCellHost byte = 'H' // sandboxd -> launcher: JSON CellInit

// CellInit configures a cell host.
type CellInit struct {
	// Key seals the frames the launcher sends before the first job.
	Key []byte `json:"key"`
	// Seccomp is the profile's filter as a BPF program (sock_filter array,
	// native byte order), installed in each cell before its interpreter
	// starts: it stacks on the host's filter, which allows what building a
	// cell needs and which the code must not have.
	Seccomp []byte `json:"seccomp"`
	// Native builds each cell with the launcher's own namespaces instead
	// of bubblewrap's: under gVisor, where the launcher is root inside the
	// sandbox and bubblewrap cannot run (cellnative.go).
	Native bool `json:"native,omitempty"`
	// UID and GID are the code's, inside and outside the cell.
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Masked are the /proc and /sys paths a sandbox must not read: the engine's
// defaults and the host-wide facts a sandbox has no use for. A container
// masks them through the engine (MaskedPaths); a cell host, whose /proc the
// engine leaves whole so that bubblewrap can mount each cell's own, masks
// them in every cell.
var Masked = []string{
	// The engine's defaults (moby's oci.DefaultSpec).
	"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
	"/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	// Host-wide facts.
	"/proc/cmdline", "/proc/stat", "/proc/loadavg", "/proc/interrupts", "/proc/softirqs", "/proc/buddyinfo",
	"/proc/pagetypeinfo", "/proc/zoneinfo", "/proc/schedstat", "/proc/diskstats", "/proc/vmallocinfo", "/proc/slabinfo",
}

// CellStatus is what a cell's init (the launcher, as pid 1 of the cell's
// PID namespace) reports of the interpreter when it has ended: exactly how
// it ended, which bubblewrap's exit code cannot say (137 is SIGKILL and
// exit(137) alike).
type CellStatus struct {
	ExitCode int   `json:"exit_code"`
	Signal   int   `json:"signal,omitempty"` // the signal that ended it, 0 for an exit
	MaxRSSKB int64 `json:"max_rss_kb"`
	// UserCPUMS and SysCPUMS are the interpreter's CPU (its waited-for
	// children's included), from the kernel's rusage of it.
	UserCPUMS int64  `json:"user_cpu_ms"`
	SysCPUMS  int64  `json:"sys_cpu_ms"`
	Error     string `json:"error,omitempty"`
}
