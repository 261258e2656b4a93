// Package nsjail runs one command in a throwaway Linux jail over a
// workspace directory and reports what happened in a [Receipt]. It is the
// runtime of the neonbox-ns CLI and a public API of its own, written for
// agent frameworks whose tool calls run real commands on a real
// workspace: run the call, read the receipt, then keep or throw away what
// it changed.
//
// The jail's init is the calling program itself, re-executed (as
// "neonbox-init", through /proc/self/exe): a small C init linked in with
// this package (internal/jailinit) takes over that process before the Go
// runtime starts, runs the steps the parent computed for the jail and
// execs the command. Other helpers of this package (Doctor's) re-execute
// the program under names of their own, so a program that uses it must
// call reexec.Init (package github.com/neonbox/neonbox-ns/reexec) as the
// first statement of main, and so must every TestMain whose tests use
// them:
//
//	func main() {
//		if reexec.Init() {
//			return // this process was one of neonbox-ns's helpers
//		}
//		...
//	}
//
// A program may also have its init started before its own Go runtime,
// so that the jail's namespaces are made while it starts: it defines the
// C symbol neonbox_prestart_cmd (the subcommand, argv[1], that runs a
// jail; see internal/jailinit/prestart.c) and calls [AdoptPrestarted]
// right after reexec.Init. The neonbox-ns CLI does so for exec.
//
// # A run
//
// [Run] starts the init in new user, mount, pid, uts, ipc and cgroup
// namespaces, and a network namespace with only lo unless the policy
// grants network. The init builds a fresh root holding the host's /usr, /etc
// and /bin, /sbin, /lib* read-only, a fresh /proc, a minimal /dev and a
// private /tmp (HOME is /tmp/home), and presents the workspace at its own
// path as overlayfs: the workspace is the lower layer, the upper and work
// dirs sit in a run directory under [Options.StateDir] (a policy without
// fs-write gets the workspace read-only instead). It then drops
// every capability, sets no_new_privs, loads the seccomp filters (the
// package's own deny list, then the policy's) and execs the command, which
// is pid 1 of its pid namespace. A cgroup made for the run enforces the
// limits of the policy and of [Options.Limits], and measures the run.
// When the command exits, everything it left running dies with the pid
// namespace and the overlay goes with the mount namespace; the changes in
// the upper dir are then committed onto the workspace, held, or thrown
// away.
//
// The [Receipt] says what happened: the [Status], exit code and signal,
// timings, the cgroup's counters, the changes as added, modified and
// deleted paths (reported for rolled-back runs too), and whether they
// were committed, held or rolled back. Its JSON field names are a stable
// contract ([Receipt.WriteJSON]).
//
// What a run may do is a policy (package policies): [Options.Policy], nil
// for the built-in "default" one (may write the workspace and start
// processes; no network, no limits; .git hooks and config are protected
// paths). As root, the jail's ids map to a block of unused host ids and
// the workspace is presented through an idmapped mount, so the state dir
// and each of its ancestors must be searchable by others (o+x). As
// another user, the jail maps only its root to that user, who must own the
// workspace. Runs that may write a workspace take it one at a time
// ([Options.LockTimeout], [ErrWorkspaceBusy]).
//
// # The agent loop
//
// With the default [CommitOnSuccess], a run that ends in [StatusSuccess]
// is committed and any other is rolled back, so a tool call can simply be
// run and its receipt read:
//
//	r, err := nsjail.Run(ctx, nsjail.Options{
//		Command:       []string{"sh", "-c", toolCall},
//		Workspace:     "/src/project",
//		Timeout:       2 * time.Minute,
//		CaptureOutput: true, // *r.Stdout, *r.Stderr
//	})
//	if err != nil {
//		return err // invalid options: nothing was touched
//	}
//	// r.Status, r.ExitCode, *r.Stdout, r.Changes, r.Committed
//
// [CommitAlways] commits whatever the command's exit status, unless the
// run ended in SANDBOX_ERROR or SECURITY_VIOLATION; [CommitNever] reports
// the changes and always rolls them back. A change to a path the policy
// (or [Options.Protect]) protects is never committed: the run becomes
// SECURITY_VIOLATION and [Receipt.ProtectedPathsTouched] lists the paths.
//
// To review a change before it lands, set [Options.Hold]: once the
// command has run, its changes are kept, whatever its exit status,
// instead of being committed or rolled back, and the receipt has Held set
// and the run's ID. Then:
//
//  1. [LoadHeld](stateDir, r.ID) returns the [HeldRun] ([ListHeld] lists
//     them all);
//  2. [HeldRun.Diff] plans it against the workspace as it is now (its
//     Changes lists the added, modified and deleted paths), and
//     [HeldRun.Patch] writes a unified diff of its text files;
//  3. [CommitHeld] applies it, as an undoable transaction, or
//     [DiscardHeld] throws it away.
//
// CommitHeld applies nothing and returns an *overlay.ConflictError if
// the workspace changed one of the paths the run changes since the run
// ended (changes elsewhere do not conflict), and [ErrProtected] if the
// run changed protected paths. See ExampleRun_hold.
//
// # Undo and history
//
// Every commit, of a run or of a held run, is a transaction journaled in
// the state dir: each step is a rename(2), and what a step replaces or
// deletes is moved aside rather than removed. If the process dies in the
// middle, the next Run, CommitHeld, [Undo] or [Recover] on that workspace
// rolls the interrupted commit back, so the workspace is as before the run or as
// after the commit, never a mix. (With the state dir on another
// filesystem than the workspace, rename cannot work: the commit copies,
// is neither transactional nor undoable, and a warning says so.)
//
// The newest [Options.KeepHistory] commits per workspace (default
// [DefaultKeepHistory]) stay undoable. [Undo] reverts the last one
// exactly: what it added is removed, what it replaced or deleted comes
// back. Calling Undo again walks further back; it returns
// [ErrNothingToUndo] when no history is left, and an
// *overlay.ConflictError, changing nothing, when a path the commit wrote
// has changed since.
//
// # Many short calls
//
// [NewPool] keeps jails for one workspace and policy prepared ahead of
// time (namespaces, filesystem view, cgroup), so that a call costs less
// than a cold [Run]. [Pool.Exec] still runs each call in a fresh jail
// with its own overlay upper dir and cgroup: a call sees what earlier
// calls committed to the workspace and nothing else of them. Exec takes
// Command, Cwd, Timeout, Env, HostEnv, the streams, CaptureOutput,
// OutputLimit and Commit from its Options; the rest comes from the
// options given to NewPool. [Pool.Close] ends the prepared jails and
// waits for the background teardowns; [Pool.Err] reports the last error
// met preparing or tearing down a jail.
//
// # Cancellation and timeouts
//
// Canceling ctx while the command runs kills the jail, and the run ends
// with [StatusCanceled]; a run that outlives [Options.Timeout] (or the
// policy's timeout) is killed and ends with [StatusTimeout]. Everything
// in the jail dies with its pid namespace. Under the default
// CommitOnSuccess the changes are rolled back. A ctx that ends while the
// run still waits for the workspace lock gives SANDBOX_ERROR with stage
// "lock".
//
// # Errors
//
// Run returns an error only for invalid options (no command, a workspace
// that does not exist, an invalid policy, a state dir the jail's ids
// cannot reach, a secret-looking variable kept without being allowed,
// ...): errors.Is(err, [ErrInvalid]) holds and nothing was touched.
// Every other outcome, the sandbox's own failures included, is a receipt.
// Its Status says what happened, and for SANDBOX_ERROR, for refused
// commits and for a command that could not be executed its Error, a
// [*StepError], names the stage ("lock", "recover", "seccomp", "cgroup",
// "rootfs", "workspace", "pivot_root", "credentials", "exec", "commit",
// "hold", ...), the operation, the path and the errno. [Pool.Exec] also
// fails when the pool is closed or ctx ends before a prepared jail is
// free.
//
// The statuses, and what neonbox-ns exec exits with for each
// ([Receipt.ExitStatus]; invalid options exit [ExitUsage], 2):
//
//	status              when                                       exit status
//	SUCCESS             the command exited 0                       0
//	EXECUTION_ERROR     it exited with status n                    n
//	                    it died of signal n                        128+n
//	                    it could not be executed / was not found   126 / 127
//	TIMEOUT             it outlived its timeout                    124 (ExitTimeout)
//	CANCELED            ctx was canceled                           130 (ExitCanceled)
//	MEMORY_EXCEEDED     an OOM kill in the run's cgroup            137 (ExitMemory)
//	SECURITY_VIOLATION  seccomp killed it with SIGSYS              128+SIGSYS
//	                    the commit was refused (special files,     123 (ExitViolation)
//	                    protected paths)
//	SANDBOX_ERROR       an isolation step failed                   125 (ExitSandbox)
//
// # Checking a machine
//
// [Doctor] checks what the default policy needs on this machine (kernel
// version, user namespaces, overlayfs, idmapped mounts when root,
// cgroups, seccomp, pidfd) and runs a real jail last; each [Check] comes
// with a remedy when it fails, and [Healthy] reports whether every
// required one passed. An agent framework can call it once at start-up
// to fail early with a useful message.
package nsjail
