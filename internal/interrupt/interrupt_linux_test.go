package interrupt

import (
	"context"
	"os"
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
			assert.EqualError(t, context.Cause(ctx), "interrupted by "+sig.String())
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
