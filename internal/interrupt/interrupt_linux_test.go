package interrupt

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func awaitDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the signal did not cancel the context")
	}
}

func TestSignalCancels(t *testing.T) {
	sigs := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
	for _, sig := range sigs {
		t.Run(sig.String(), func(t *testing.T) {
			ctx, stop, err := Catch(context.Background(), sigs...)
			require.NoError(t, err)
			defer stop()
			require.NoError(t, syscall.Kill(os.Getpid(), sig))
			awaitDone(t, ctx)
			assert.EqualError(t, context.Cause(ctx), "interrupted by "+unix.SignalName(sig))
		})
	}
}

// After the first signal, and after stop, the signals meet the Go
// runtime's handlers again: here os/signal's, which a handler still
// installed would have kept from them.
func TestRuntimeHandlersComeBack(t *testing.T) {
	notified := func(sig syscall.Signal) {
		t.Helper()
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, sig)
		defer signal.Stop(ch)
		require.NoError(t, syscall.Kill(os.Getpid(), sig))
		select {
		case got := <-ch:
			assert.Equal(t, sig, got)
		case <-time.After(10 * time.Second):
			t.Fatalf("%v did not reach os/signal", sig)
		}
	}

	ctx, stop, err := Catch(context.Background(), syscall.SIGHUP, syscall.SIGTERM)
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	awaitDone(t, ctx)
	notified(syscall.SIGTERM) // the second signal, before stop
	stop()

	ctx, stop, err = Catch(context.Background(), syscall.SIGHUP)
	require.NoError(t, err)
	stop()
	assert.ErrorIs(t, context.Cause(ctx), context.Canceled) // stop, not a signal
	notified(syscall.SIGHUP)
}

// A Catch after a stop starts clean: nothing a signal wrote before
// cancels it.
func TestCatchAgainStartsClean(t *testing.T) {
	ctx, stop, err := Catch(context.Background(), syscall.SIGHUP)
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	awaitDone(t, ctx)
	stop()
	// What the handler writes when its signal is let go by the
	// goroutine's restore, left for the next Catch to drain.
	_, err = unix.Write(wakeW, []byte{byte(syscall.SIGHUP)})
	require.NoError(t, err)

	ctx, stop, err = Catch(context.Background(), syscall.SIGHUP)
	require.NoError(t, err)
	defer stop()
	select {
	case <-ctx.Done():
		t.Fatalf("canceled by a stale byte: %v", context.Cause(ctx))
	case <-time.After(50 * time.Millisecond):
	}
}

func TestCatchRefusesNoSignals(t *testing.T) {
	_, _, err := Catch(context.Background())
	assert.Error(t, err)
}

func TestCatchIsOneAtATime(t *testing.T) {
	_, stop, err := Catch(context.Background(), syscall.SIGHUP)
	require.NoError(t, err)
	_, _, err = Catch(context.Background(), syscall.SIGHUP)
	assert.Error(t, err)
	stop()
	_, stop, err = Catch(context.Background(), syscall.SIGHUP)
	require.NoError(t, err)
	stop()
}

// A signal the process was started with ignored (as under nohup) stays
// ignored: it neither cancels the context nor ends the process. The test
// binary runs itself with SIGHUP ignored, from a shell's trap.
func TestIgnoredSignalStaysIgnored(t *testing.T) {
	if os.Getenv("NEONBOX_INTERRUPT_CHILD") != "" {
		ignoredChild()
		return
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to start the test binary with SIGHUP ignored")
	}
	cmd := exec.Command(sh, "-c", `trap "" HUP; exec "$0" -test.run '^TestIgnoredSignalStaysIgnored$'`, os.Args[0])
	cmd.Env = append(os.Environ(), "NEONBOX_INTERRUPT_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "canceled by SIGTERM, not by SIGHUP")
}

func ignoredChild() {
	ctx, stop, err := Catch(context.Background(), syscall.SIGHUP, syscall.SIGTERM)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	defer stop()
	_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
	select {
	case <-ctx.Done():
		fmt.Println("canceled by an ignored signal:", context.Cause(ctx))
		os.Exit(1)
	case <-time.After(50 * time.Millisecond):
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case <-ctx.Done():
		fmt.Println("canceled by SIGTERM, not by SIGHUP:", context.Cause(ctx))
	case <-time.After(10 * time.Second):
		fmt.Println("SIGTERM did not cancel")
		os.Exit(1)
	}
}
