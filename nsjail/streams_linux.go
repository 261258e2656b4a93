package nsjail

// Runs in the parent: CMD's standard streams as descriptors for the
// jail's init.

import (
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// streams are CMD's stdin, stdout and stderr as the init (or a Pool's
// call) gets them, made as os/exec makes them: a *os.File is passed as
// itself, nil as /dev/null, and any other reader or writer through a
// pipe that a goroutine of this process copies; one writer given for
// both stdout and stderr gets one pipe, so that it is never written
// from two goroutines at once.
type streams struct {
	files  [3]*os.File   // for the init
	passed []*os.File    // of files, the ones this process made: closed once the init has them
	ours   []*os.File    // this process's ends of the pipes
	copied chan struct{} // one value per output's copying goroutine
	copies int
}

func openStreams(stdin io.Reader, stdout, stderr io.Writer) (*streams, error) {
	s := &streams{copied: make(chan struct{}, 3)}
	var err error
	if s.files[0], err = s.input(stdin); err == nil {
		if s.files[1], err = s.output(stdout); err == nil {
			if sameWriter(stdout, stderr) {
				s.files[2] = s.files[1]
			} else {
				s.files[2], err = s.output(stderr)
			}
		}
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// sameWriter is a == b, false where the writers cannot be compared.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() { _ = recover() }()
	return a == b
}

func (s *streams) input(r io.Reader) (*os.File, error) {
	if f, ok := r.(*os.File); ok && f != nil {
		return f, nil
	} else if r == nil || ok {
		return s.devNull(os.O_RDONLY)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.passed, s.ours = append(s.passed, pr), append(s.ours, pw)
	// Not waited for: CMD need not read all its input, and r may never
	// end. Its pipe is closed when the jail has ended (wait).
	go func() {
		_, _ = io.Copy(pw, r)
		pw.Close()
	}()
	return pr, nil
}

func (s *streams) output(w io.Writer) (*os.File, error) {
	if f, ok := w.(*os.File); ok && f != nil {
		return f, nil
	} else if w == nil || ok {
		return s.devNull(os.O_WRONLY)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.passed, s.ours = append(s.passed, pw), append(s.ours, pr)
	s.copies++
	go func() {
		_, _ = io.Copy(w, pr) // a writer's error ends the copy; CMD sees EPIPE
		pr.Close()
		s.copied <- struct{}{}
	}()
	return pw, nil
}

func (s *streams) devNull(flag int) (*os.File, error) {
	f, err := os.OpenFile(os.DevNull, flag, 0)
	if err == nil {
		s.passed = append(s.passed, f)
	}
	return f, err
}

// rights is the control message that passes the three descriptors, in
// order, to the init.
func (s *streams) rights() []byte {
	f := s.files
	return unix.UnixRights(int(f[0].Fd()), int(f[1].Fd()), int(f[2].Fd()))
}

// handedOver closes this process's copies of the descriptors the init now
// has: the jail's end of a pipe is then held by the jail alone, and the
// copy ends when the jail does.
func (s *streams) handedOver() {
	for _, f := range s.passed {
		f.Close()
	}
	s.passed = nil
}

// wait waits for the copying of the output to end, once the jail has.
// After delay it stops waiting and closes the pipes (a descriptor of the
// jail's may have outlived it, or a writer may be slow): output that has
// not been copied by then is lost.
func (s *streams) wait(delay time.Duration) {
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for ; s.copies > 0; s.copies-- {
		select {
		case <-s.copied:
		case <-timer.C:
			s.closeOurs()
			return
		}
	}
	s.closeOurs()
}

// close closes every descriptor the streams hold: for streams that no
// init got.
func (s *streams) close() {
	s.handedOver()
	s.closeOurs()
}

func (s *streams) closeOurs() {
	for _, f := range s.ours {
		f.Close()
	}
	s.ours = nil
}
