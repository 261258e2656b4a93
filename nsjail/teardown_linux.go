package nsjail

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/neonbox/neonbox-ns/cgroup"
	"github.com/neonbox/neonbox-ns/internal/jailinit"
	"github.com/neonbox/neonbox-ns/reexec"
)

// The teardown helper of `neonbox-ns exec` (jailinit.Teardown) removes a
// run's cgroup and run dir after neonbox-ns has exited. Where its C could
// not remove everything, it re-executes the binary under this name with
// the run dir: the run is removed here, as a later run's sweep would
// (killing what is left in the cgroup, a tree of any depth).
func init() {
	reexec.Register(jailinit.TeardownFallback, func() {
		// Only a run dir: <state>/runs/<id>.
		if len(os.Args) != 2 || filepath.Base(filepath.Dir(os.Args[1])) != "runs" || !runIDRE().MatchString(filepath.Base(os.Args[1])) {
			os.Exit(2)
		}
		if err := (runDir{path: os.Args[1]}).removeAbandoned(); err != nil {
			os.Exit(1)
		}
	})
}

// handTeardown gives the run's cgroup and run dir, and the jail's mount
// namespace if it has ended, to the teardown helper, which removes them
// after neonbox-ns has exited. The helper becomes an owner of the run dir
// first, so that no other run's sweep takes the run for abandoned while
// the helper is at it (and a run whose neonbox-ns was killed, never
// handed over, is abandoned at once). On an error nothing was handed
// over.
func handTeardown(td *jailinit.Teardown, helper string, cg *cgroup.Cgroup, rd runDir, ended *jailResult) error {
	if helper == "" {
		return errors.New("no teardown helper")
	}
	job := jailinit.TeardownJob{RunDir: rd.path}
	if rd.path != "" {
		switch err := rd.addOwner(helper); {
		case errors.Is(err, fs.ErrNotExist):
			job.RunDir = "" // held: moved away
		case err != nil:
			return err
		}
	}
	if cg != nil {
		job.Cgroups, job.Shared = cg.Dirs()
	}
	if ended != nil {
		job.MountNS = ended.mountNS
	}
	if err := td.Hand(job); err != nil {
		return err
	}
	if cg != nil {
		cg.Disown()
	}
	if ended != nil {
		ended.releaseMountNS() // not the last reference: the helper has one
	}
	return nil
}

// helperIdentity is the identity of td's process (see processIdentity),
// "" if it could not be started or is gone.
func helperIdentity(td *jailinit.Teardown) string {
	pid, err := td.Pid()
	if err != nil {
		return ""
	}
	return processIdentity(pid)
}
