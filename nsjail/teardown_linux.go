package nsjail

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
		if len(os.Args) != 2 || !helperOwns(os.Args[1]) {
			os.Exit(2)
		}
		if err := (runDir{path: os.Args[1]}).removeAbandoned(); err != nil {
			os.Exit(1)
		}
	})
}

// helperOwns reports whether dir is a run dir (<state>/runs/<id>, a
// directory, not a symlink) whose owners include this process: the
// teardown helper, which re-executed itself keeping its pid and start
// time. Nothing else is this entry point's to remove.
func helperOwns(dir string) bool {
	if filepath.Base(filepath.Dir(dir)) != "runs" || !isRunID(filepath.Base(dir)) {
		return false
	}
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		return false
	}
	owner, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil {
		return false
	}
	self := selfIdentity()
	return self != "" && slices.Contains(strings.Split(string(owner), "\n"), self)
}

// handTeardown gives the run's cgroup and run dir, and the jail's mount
// namespace if it has ended, to the teardown helper, which removes them
// after neonbox-ns has exited. The helper becomes an owner of the run dir
// first, so that no other run's sweep takes the run for abandoned while
// the helper is at it (and a run whose neonbox-ns was killed, never
// handed over, is abandoned at once). On an error nothing was handed
// over.
func handTeardown(td *jailinit.Teardown, helper string, cg *cgroup.Cgroup, rd runDir, held bool, ended *jailResult) error {
	switch {
	case helper == "":
		return errors.New("no teardown helper")
	case rd.path == "" || held:
		// Without a run dir (or with a held one, moved away) the helper
		// would have nothing to fall back on for the cgroup, which
		// later runs find through run dirs.
		return errors.New("no run dir to hand over")
	}
	if err := rd.addOwner(helper); err != nil {
		return err
	}
	job := jailinit.TeardownJob{RunDir: rd.path, Spare: rd.spare()}
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
		ended.mountNS = nil // Hand closed it: the helper has the namespace
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
