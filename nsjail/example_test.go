package nsjail_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/neonbox/neonbox-ns/nsjail"
)

// These examples run real jails when go test runs them: as root, or as a
// user allowed to create user namespaces. The test binary's TestMain
// calls reexec.Init, as a program's main must.

// A tool call: run a command over a workspace, capture its output and
// read the receipt. It succeeded, so its change was committed.
func ExampleRun() {
	// A workspace and a state dir. As root, the jail's unprivileged ids
	// must reach the state dir: every ancestor needs o+x (MkdirTemp
	// makes 0700; /tmp itself is 1777).
	base, err := os.MkdirTemp("", "nsjail-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o755); err != nil {
		log.Fatal(err)
	}
	ws, state := filepath.Join(base, "ws"), filepath.Join(base, "state")
	if err := os.Mkdir(ws, 0o755); err != nil {
		log.Fatal(err)
	}

	r, err := nsjail.Run(context.Background(), nsjail.Options{
		Command:       []string{"sh", "-c", "echo hello > greeting.txt; cat greeting.txt"},
		Workspace:     ws,
		StateDir:      state,
		CaptureOutput: true, // stdout and stderr go into the receipt
	})
	if err != nil {
		log.Fatal(err) // invalid options only
	}
	fmt.Println("status:", r.Status)
	fmt.Println("exit code:", r.ExitCode)
	fmt.Print("stdout: ", *r.Stdout)
	fmt.Println("committed:", r.Committed)
	for _, c := range r.Changes.Added {
		fmt.Println("added:", c.Path, c.Type, *c.Size)
	}
	b, _ := os.ReadFile(filepath.Join(ws, "greeting.txt"))
	fmt.Print("workspace: ", string(b))
	// Output:
	// status: SUCCESS
	// exit code: 0
	// stdout: hello
	// committed: true
	// added: greeting.txt file 6
	// workspace: hello
}

// Hold a run's changes, review them, then commit them (or throw them
// away with DiscardHeld).
func ExampleRun_hold() {
	// A workspace and a state dir the jail's ids can reach (see ExampleRun).
	base, err := os.MkdirTemp("", "nsjail-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o755); err != nil {
		log.Fatal(err)
	}
	ws, state := filepath.Join(base, "ws"), filepath.Join(base, "state")
	if err := os.Mkdir(ws, 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("draft\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	r, err := nsjail.Run(ctx, nsjail.Options{
		Command:   []string{"sh", "-c", "echo final > notes.txt"},
		Workspace: ws,
		StateDir:  state,
		Hold:      true,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Status, "held:", r.Held, "committed:", r.Committed)

	h, err := nsjail.LoadHeld(state, r.ID)
	if err != nil {
		log.Fatal(err)
	}
	plan, err := h.Diff()
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range plan.Changes.Modified {
		fmt.Println("M", c.Path)
	}
	if err := h.Patch(os.Stdout); err != nil {
		log.Fatal(err)
	}

	res, err := nsjail.CommitHeld(ctx, state, r.ID, 0)
	if err != nil {
		// *overlay.ConflictError: the workspace changed those paths
		// since the run; nsjail.ErrProtected: the run touched paths the
		// policy protects. Nothing was applied.
		log.Fatal(err)
	}
	fmt.Println("committed", len(res.Changes.Modified), "modified path")
	b, _ := os.ReadFile(filepath.Join(ws, "notes.txt"))
	fmt.Print("workspace: ", string(b))
	// Output:
	// SUCCESS held: true committed: false
	// M notes.txt
	// --- a/notes.txt
	// +++ b/notes.txt
	// @@ -1 +1 @@
	// -draft
	// +final
	// committed 1 modified path
	// workspace: final
}

// Undo reverts the last committed run on a workspace.
func ExampleUndo() {
	// A workspace and a state dir the jail's ids can reach (see ExampleRun).
	base, err := os.MkdirTemp("", "nsjail-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o755); err != nil {
		log.Fatal(err)
	}
	ws, state := filepath.Join(base, "ws"), filepath.Join(base, "state")
	if err := os.Mkdir(ws, 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "config"), []byte("v1\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	r, err := nsjail.Run(ctx, nsjail.Options{
		Command:   []string{"sh", "-c", "echo v2 > config; echo new > added"},
		Workspace: ws,
		StateDir:  state,
	})
	if err != nil {
		log.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(ws, "config"))
	fmt.Print(r.Status, " committed: ", r.Committed, ", config: ", string(b))

	u, err := nsjail.Undo(ctx, nsjail.WorkspaceOptions{Workspace: ws, StateDir: state})
	if err != nil {
		log.Fatal(err) // nsjail.ErrNothingToUndo, *overlay.ConflictError, ...
	}
	fmt.Println("undid the run:", u.RunID == r.ID)
	b, _ = os.ReadFile(filepath.Join(ws, "config"))
	fmt.Print("config: ", string(b))
	_, err = os.Stat(filepath.Join(ws, "added"))
	fmt.Println("added exists:", err == nil)

	_, err = nsjail.Undo(ctx, nsjail.WorkspaceOptions{Workspace: ws, StateDir: state})
	fmt.Println("again:", errors.Is(err, nsjail.ErrNothingToUndo))
	// Output:
	// SUCCESS committed: true, config: v2
	// undid the run: true
	// config: v1
	// added exists: false
	// again: true
}

// A Pool keeps jails prepared for one workspace and policy; each call
// still runs in a fresh jail, and sees what earlier calls committed.
func ExampleNewPool() {
	// A workspace and a state dir the jail's ids can reach (see ExampleRun).
	base, err := os.MkdirTemp("", "nsjail-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o755); err != nil {
		log.Fatal(err)
	}
	ws, state := filepath.Join(base, "ws"), filepath.Join(base, "state")
	if err := os.Mkdir(ws, 0o755); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	pool, err := nsjail.NewPool(ctx, nsjail.Options{Workspace: ws, StateDir: state}, 2)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close() // waits for the background teardowns

	for _, cmd := range []string{"echo one > a.txt", "cat a.txt"} {
		r, err := pool.Exec(ctx, nsjail.Options{
			Command:       []string{"sh", "-c", cmd},
			CaptureOutput: true,
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s, committed %v, stdout %q\n", cmd, r.Status, r.Committed, *r.Stdout)
	}
	// Output:
	// echo one > a.txt: SUCCESS, committed true, stdout ""
	// cat a.txt: SUCCESS, committed true, stdout "one\n"
}

// A run that outlives its Timeout is killed and rolled back; canceling
// the context instead would give StatusCanceled.
func ExampleRun_timeout() {
	// A workspace and a state dir the jail's ids can reach (see ExampleRun).
	base, err := os.MkdirTemp("", "nsjail-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(base)
	if err := os.Chmod(base, 0o755); err != nil {
		log.Fatal(err)
	}
	ws, state := filepath.Join(base, "ws"), filepath.Join(base, "state")
	if err := os.Mkdir(ws, 0o755); err != nil {
		log.Fatal(err)
	}

	r, err := nsjail.Run(context.Background(), nsjail.Options{
		Command:   []string{"sh", "-c", "echo partial > out.txt; sleep 10"},
		Workspace: ws,
		StateDir:  state,
		Timeout:   200 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", r.Status)
	fmt.Println("exit status:", r.ExitStatus())
	fmt.Println("committed:", r.Committed, "rolled back:", r.RollbackPerformed)
	_, err = os.Stat(filepath.Join(ws, "out.txt"))
	fmt.Println("out.txt exists:", err == nil)
	// Output:
	// status: TIMEOUT
	// exit status: 124
	// committed: false rolled back: true
	// out.txt exists: false
}

// Run returns an error only for invalid options, before anything is
// touched; every other failure is reported in the receipt.
func ExampleRun_invalid() {
	_, err := nsjail.Run(context.Background(), nsjail.Options{
		Command:   []string{"true"},
		Workspace: "/nonexistent/workspace",
	})
	fmt.Println(errors.Is(err, nsjail.ErrInvalid))
	// Output:
	// true
}
